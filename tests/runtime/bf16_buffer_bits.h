// The ops with a bf16 activation buffer (ActivationOut/In) give the bits of the fp32 buffer's ops
// around the bf16-storage casts, on any backend that takes one (supports(op, BF16)):
// - the attention ops' probabilities (and output): forward writes the fp32 op's output and
//   cast_to_bf16 of its probabilities (of its output too, into a bf16 one); backward on them gives
//   what it gives on fp32 buffers of the same values;
// - the norms' forward output: cast_to_bf16 of the fp32 op's, with the same statistics;
// - the norms' backward on a bf16 input: the bits it gives on that input widened into fp32;
// - GeLU (alone and after its GEMM) and SwiGLU into a bf16 buffer: cast_to_bf16 of the fp32 op's;
//   and their backward, and the attention's, on bf16 inputs: the bits they give on those inputs
//   widened into fp32;
// - under bf16 compute the GEMMs' input: a bf16 input gives the bits of the fp32 input it rounds.
// This is what lets bf16 storage keep those values without an fp32 copy and change no bit
// (model/gpt_bf16_storage.cpp). tests/runtime/test_ops_bf16.cpp runs them on the CPU backend,
// tests/cuda/test_cuda_autocast.cpp on the emulated (or real) CUDA backend.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "tests/support/backend_buffers.h"

namespace pipelane::bf16_buffers_test {

// Buffers of one test in a backend's arena; bf16(n): n zero bf16 elements.
class Buffers : public testing::BackendBuffers {
 public:
  explicit Buffers(Backend& backend) : BackendBuffers(backend, "bf16 buffers", std::size_t{8} << 20) {}
  std::uint16_t* bf16(std::size_t n) { return zeros<std::uint16_t>(n); }
};

inline std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " elements differ";
}

// MHA (fused qkv) when kv_heads == 0, else GQA with that many kv heads.
inline void expect_bf16_probabilities_change_no_bit(Backend& backend, int kv_heads) {
  const bool gqa = kv_heads > 0;
  ASSERT_TRUE(backend.supports(gqa ? OpKind::AttentionForwardGqa : OpKind::AttentionForward, DType::BF16));
  ASSERT_TRUE(backend.supports(gqa ? OpKind::AttentionBackwardGqa : OpKind::AttentionBackward, DType::BF16));
  const int B = 2, T = 9, NH = 4, hs = 8, KVH = gqa ? kv_heads : NH, N = B * T, C = NH * hs;
  const std::size_t nq = static_cast<std::size_t>(N) * C, nkv = static_cast<std::size_t>(N) * KVH * hs;
  const std::size_t na = gqa ? backend.attention_gqa_saved_floats(B, T, NH, hs)
                             : backend.attention_saved_floats(B, T, C, NH);
  ASSERT_EQ(na, static_cast<std::size_t>(B) * NH * T * T) << "the probabilities";
  std::mt19937 rng(20261205u + kv_heads);
  Buffers b(backend);
  // MHA: one [N, 3C] allocation (q at 0, k at C, v at 2C of each row); GQA: three.
  const std::vector<float> q_host = random_floats(rng, gqa ? nq : 3 * nq), k_host = random_floats(rng, nkv),
                           v_host = random_floats(rng, nkv), dout_host = random_floats(rng, nq);
  float *q = b.upload(q_host), *k = gqa ? b.upload(k_host) : nullptr, *v = gqa ? b.upload(v_host) : nullptr;
  float* dout = b.upload(dout_host);
  const auto forward = [&](ActivationOut out, ActivationOut att) {
    if (gqa) backend.attention_forward_gqa(out, att, q, k, v, B, T, NH, KVH, hs, b.stream());
    else backend.attention_forward(out, att, q, B, T, C, NH, b.stream());
  };
  // The input gradients, downloaded (MHA: dqkv; GQA: dq, dk, dv one after the other).
  const auto backward = [&](ActivationIn out, ActivationIn att) {
    if (!gqa) {
      float* dqkv = b.zeros(3 * nq);
      backend.attention_backward(dqkv, dout, q, out, att, B, T, C, NH, b.stream());
      return b.download(dqkv, 3 * nq);
    }
    float *dq = b.zeros(nq), *dk = b.zeros(nkv), *dv = b.zeros(nkv);
    backend.attention_backward_gqa(dq, dk, dv, dout, q, k, v, out, att, B, T, NH, KVH, hs, b.stream());
    std::vector<float> all = b.download(dq, nq), dkh = b.download(dk, nkv), dvh = b.download(dv, nkv);
    all.insert(all.end(), dkh.begin(), dkh.end());
    all.insert(all.end(), dvh.begin(), dvh.end());
    return all;
  };
  const std::string what = gqa ? "gqa" : "mha";

  float *out32 = b.zeros(nq), *att32 = b.zeros(na), *out16 = b.zeros(nq);
  std::uint16_t* att16 = b.bf16(na);
  forward(out32, att32);
  forward(out16, ActivationOut::of_bf16(att16));
  expect_same_bits(b.download(out16, nq), b.download(out32, nq), what + " forward output");
  std::uint16_t* cast = b.bf16(na);
  backend.cast_to_bf16(cast, att32, na, b.stream());
  expect_same_bits(b.download(att16, na), b.download(cast, na), what + " probabilities (against cast_to_bf16)");

  backend.round_to_bf16(att32, na, b.stream());  // the fp32 buffer now holds the bf16 values
  expect_same_bits(backward(out16, ActivationIn::of_bf16(att16)), backward(out32, att32), what + " input gradients");

  // The output in bf16 too: cast_to_bf16 of the fp32 output; the backward given it (and the bf16
  // probabilities) gives what it gives on an fp32 output of the same values.
  std::uint16_t *y16 = b.bf16(nq), *y_cast = b.bf16(nq), *att16_again = b.bf16(na);
  forward(ActivationOut::of_bf16(y16), ActivationOut::of_bf16(att16_again));
  backend.cast_to_bf16(y_cast, out32, nq, b.stream());
  expect_same_bits(b.download(y16, nq), b.download(y_cast, nq), what + " output (against cast_to_bf16)");
  expect_same_bits(b.download(att16_again, na), b.download(att16, na), what + " probabilities beside a bf16 output");
  backend.round_to_bf16(out32, nq, b.stream());
  expect_same_bits(backward(ActivationIn::of_bf16(y16), ActivationIn::of_bf16(att16)), backward(out32, att32),
                   what + " input gradients on a bf16 output");
}

// The attention ops on bf16 q, k, v (MHA: one fused qkv; GQA, kv_heads > 0: three), with every
// activation in bf16 as bf16 storage keeps them: the bits they give on those values widened into
// fp32 (cast_from_bf16) - the forward's output and probabilities, the backward's gradients.
inline void expect_bf16_attention_inputs_change_no_bit(Backend& backend, int kv_heads) {
  const bool gqa = kv_heads > 0;
  const int B = 2, T = 7, NH = 4, hs = 8, KVH = gqa ? kv_heads : NH, N = B * T, C = NH * hs;
  const std::size_t nq = static_cast<std::size_t>(N) * C, nkv = static_cast<std::size_t>(N) * KVH * hs;
  const std::size_t na = static_cast<std::size_t>(B) * NH * T * T;
  std::mt19937 rng(20261210u + kv_heads);
  Buffers b(backend);
  // Each operand in bf16 and widened: [q | k | v] in one allocation (MHA: [N, 3C] rows; GQA: q, k, v).
  const std::size_t nall = gqa ? nq + 2 * nkv : 3 * nq;
  float* fp32 = b.upload(random_floats(rng, nall));
  std::uint16_t* x16 = b.bf16(nall);
  backend.cast_to_bf16(x16, fp32, nall, b.stream());
  float* x32 = b.zeros(nall);
  backend.cast_from_bf16(x32, x16, nall, b.stream());
  const float* dout = b.upload(random_floats(rng, nq));
  const auto run = [&](bool bf16) {
    const auto in = [&](std::size_t offset) {
      return bf16 ? ActivationIn::of_bf16(x16 + offset) : ActivationIn(x32 + offset);
    };
    std::uint16_t *out = b.bf16(nq), *att = b.bf16(na);
    std::vector<float> all;
    if (gqa) {
      backend.attention_forward_gqa(ActivationOut::of_bf16(out), ActivationOut::of_bf16(att), in(0), in(nq),
                                    in(nq + nkv), B, T, NH, KVH, hs, b.stream());
      float *dq = b.zeros(nq), *dk = b.zeros(nkv), *dv = b.zeros(nkv);
      backend.attention_backward_gqa(dq, dk, dv, dout, in(0), in(nq), in(nq + nkv), ActivationIn::of_bf16(out),
                                     ActivationIn::of_bf16(att), B, T, NH, KVH, hs, b.stream());
      for (const auto& part : {b.download(dq, nq), b.download(dk, nkv), b.download(dv, nkv)})
        all.insert(all.end(), part.begin(), part.end());
    } else {
      backend.attention_forward(ActivationOut::of_bf16(out), ActivationOut::of_bf16(att), in(0), B, T, C, NH,
                                b.stream());
      float* dqkv = b.zeros(3 * nq);
      backend.attention_backward(dqkv, dout, in(0), ActivationIn::of_bf16(out), ActivationIn::of_bf16(att), B, T, C,
                                 NH, b.stream());
      all = b.download(dqkv, 3 * nq);
    }
    for (const auto& part : {b.download(out, nq), b.download(att, na)})
      for (std::uint16_t bits : part) all.push_back(static_cast<float>(bits));
    return all;
  };
  expect_same_bits(run(true), run(false), gqa ? "gqa on bf16 q, k, v" : "mha on a bf16 qkv");
}

// LayerNorm and RMSNorm forward into a bf16 buffer: cast_to_bf16 of the fp32 output, the same
// statistics.
inline void expect_bf16_norm_outputs_change_no_bit(Backend& backend) {
  ASSERT_TRUE(backend.supports(OpKind::LayerNormForward, DType::BF16));
  ASSERT_TRUE(backend.supports(OpKind::RmsNormForward, DType::BF16));
  const int N = 13, C = 72;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  std::mt19937 rng(20261206u);
  Buffers b(backend);
  const float *x = b.upload(random_floats(rng, n)), *w = b.upload(random_floats(rng, C)),
              *bias = b.upload(random_floats(rng, C));
  for (const bool rms : {false, true}) {
    const std::string what = rms ? "rmsnorm_forward" : "layernorm_forward";
    float *out32 = b.zeros(n), *mean32 = b.zeros(N), *rstd32 = b.zeros(N), *mean16 = b.zeros(N), *rstd16 = b.zeros(N);
    std::uint16_t *out16 = b.bf16(n), *cast = b.bf16(n);
    if (rms) {
      backend.rmsnorm_forward(out32, rstd32, x, w, N, C, 1e-5f, b.stream());
      backend.rmsnorm_forward(ActivationOut::of_bf16(out16), rstd16, x, w, N, C, 1e-5f, b.stream());
    } else {
      backend.layernorm_forward(out32, mean32, rstd32, x, w, bias, N, C, b.stream());
      backend.layernorm_forward(ActivationOut::of_bf16(out16), mean16, rstd16, x, w, bias, N, C, b.stream());
    }
    backend.cast_to_bf16(cast, out32, n, b.stream());
    expect_same_bits(b.download(out16, n), b.download(cast, n), what + " output (against cast_to_bf16)");
    expect_same_bits(b.download(rstd16, N), b.download(rstd32, N), what + " rstd");
    expect_same_bits(b.download(mean16, N), b.download(mean32, N), what + " mean");
  }
}

// LayerNorm's and RMSNorm's backward (whole, and its two halves) on a bf16 input: the bits they
// give on that input widened into fp32 (cast_from_bf16), with every other operand the same.
inline void expect_bf16_norm_inputs_change_no_bit(Backend& backend) {
  for (OpKind op : {OpKind::LayerNormBackward, OpKind::LayerNormBackwardInput, OpKind::LayerNormBackwardParams,
                    OpKind::RmsNormBackward, OpKind::RmsNormBackwardInput, OpKind::RmsNormBackwardParams})
    ASSERT_TRUE(backend.supports(op, DType::BF16)) << op_kind_name(op);
  const int N = 13, C = 72;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  std::mt19937 rng(20261208u);
  Buffers b(backend);
  float* x = b.upload(random_floats(rng, n));
  std::uint16_t* x16 = b.bf16(n);
  backend.cast_to_bf16(x16, x, n, b.stream());
  float* widened = b.zeros(n);
  backend.cast_from_bf16(widened, x16, n, b.stream());
  const float *w = b.upload(random_floats(rng, C)), *bias = b.upload(random_floats(rng, C));
  const float *dy = b.upload(random_floats(rng, n)), *dres = b.upload(random_floats(rng, n));
  float *out = b.zeros(n), *mean = b.zeros(N), *rstd = b.zeros(N);
  for (const bool rms : {false, true}) {
    // The statistics of the widened input, as the forward of bf16 storage's kept value has them.
    if (rms) backend.rmsnorm_forward(out, rstd, widened, w, N, C, 1e-5f, b.stream());
    else backend.layernorm_forward(out, mean, rstd, widened, w, bias, N, C, b.stream());
    const auto run = [&](ActivationIn in) {
      // dinp accumulates (a residual stream's gradient): start both from the same values.
      float *dx = b.upload(b.download(dres, n)), *dw = b.zeros(C), *db = b.zeros(C);
      float *dx_half = b.upload(b.download(dres, n)), *dw_half = b.zeros(C), *db_half = b.zeros(C);
      if (rms) {
        backend.rmsnorm_backward(dx, dw, dy, in, w, rstd, N, C, b.stream());
        backend.rmsnorm_backward_input(dx_half, dy, in, w, rstd, N, C, b.stream());
        backend.rmsnorm_backward_params(dw_half, dy, in, rstd, N, C, b.stream());
      } else {
        backend.layernorm_backward(dx, dw, db, dy, in, w, mean, rstd, N, C, b.stream());
        backend.layernorm_backward_input(dx_half, dy, in, w, mean, rstd, N, C, b.stream());
        backend.layernorm_backward_params(dw_half, db_half, dy, in, mean, rstd, N, C, b.stream());
      }
      std::vector<float> all = b.download(dx, n);
      for (const auto& part : {b.download(dw, C), b.download(db, C), b.download(dx_half, n), b.download(dw_half, C),
                               b.download(db_half, C)})
        all.insert(all.end(), part.begin(), part.end());
      return all;
    };
    const std::vector<float> on_bf16 = run(ActivationIn::of_bf16(x16)), on_fp32 = run(widened);
    expect_same_bits(on_bf16, on_fp32, rms ? "rmsnorm_backward on a bf16 input" : "layernorm_backward on a bf16 input");
    // The gradients are there (all zeros would pass the check above too).
    std::size_t nonzero = 0;
    for (float v : on_bf16) nonzero += v != 0.f;
    EXPECT_GT(nonzero, on_bf16.size() * 9 / 10);
  }
}

// GeLU, the GeLU-fused GEMM and SwiGLU into a bf16 buffer: cast_to_bf16 of the fp32 op's output
// (and the GEMM's pre-activation as the fp32 op's).
inline void expect_bf16_activations_change_no_bit(Backend& backend) {
  for (OpKind op : {OpKind::GeluForward, OpKind::MatmulGeluForward, OpKind::SwigluForward})
    ASSERT_TRUE(backend.supports(op, DType::BF16)) << op_kind_name(op);
  // OC a multiple of 8: the CUDA backend's GeLU epilogue path; n odd: a vector loop's remainder.
  const int N = 9, C = 24, OC = 40;
  const std::size_t n = static_cast<std::size_t>(N) * OC + 3;
  std::mt19937 rng(20261209u);
  Buffers b(backend);
  const float *x = b.upload(random_floats(rng, n)), *y = b.upload(random_floats(rng, n));
  const float *in = b.upload(random_floats(rng, static_cast<std::size_t>(N) * C));
  const float* w = b.upload(random_floats(rng, static_cast<std::size_t>(OC) * C));
  const float* bias = b.upload(random_floats(rng, OC));
  const std::size_t ny = static_cast<std::size_t>(N) * OC;
  const auto against_cast = [&](const std::string& what, std::size_t count, const auto& run) {
    float* out32 = b.zeros(count);
    std::uint16_t *out16 = b.bf16(count), *cast = b.bf16(count);
    run(ActivationOut(out32));
    run(ActivationOut::of_bf16(out16));
    backend.cast_to_bf16(cast, out32, count, b.stream());
    expect_same_bits(b.download(out16, count), b.download(cast, count), what + " (against cast_to_bf16)");
  };
  against_cast("gelu_forward", n, [&](ActivationOut out) { backend.gelu_forward(out, x, n, b.stream()); });
  against_cast("swiglu_forward", n, [&](ActivationOut out) { backend.swiglu_forward(out, x, y, n, b.stream()); });
  float *pre32 = b.zeros(ny), *pre16 = b.zeros(ny);
  against_cast("matmul_gelu_forward", ny, [&](ActivationOut out) {
    backend.matmul_gelu_forward(out.is_bf16() ? pre16 : pre32, out, in, w, bias, N, C, OC, b.stream());
  });
  expect_same_bits(b.download(pre16, ny), b.download(pre32, ny), "matmul_gelu_forward's pre-activation");
}

// GeLU's backward (alone and fused after its GEMM) and SwiGLU's on bf16 inputs: the bits they give
// on those inputs widened into fp32.
inline void expect_bf16_activation_inputs_change_no_bit(Backend& backend) {
  for (OpKind op : {OpKind::GeluBackward, OpKind::MatmulBackwardInputDgelu, OpKind::SwigluBackward})
    ASSERT_TRUE(backend.supports(op, DType::BF16)) << op_kind_name(op);
  const int N = 9, C = 40, OC = 24;  // C a multiple of 8: the CUDA backend's DGELU epilogue path
  const std::size_t n = static_cast<std::size_t>(N) * C + 5;
  std::mt19937 rng(20261211u);
  Buffers b(backend);
  float* x = b.upload(random_floats(rng, 2 * n));
  std::uint16_t* x16 = b.bf16(2 * n);
  backend.cast_to_bf16(x16, x, 2 * n, b.stream());
  float* x32 = b.zeros(2 * n);
  backend.cast_from_bf16(x32, x16, 2 * n, b.stream());
  const float* dy = b.upload(random_floats(rng, n));
  const float* w = b.upload(random_floats(rng, static_cast<std::size_t>(OC) * C));
  const float* dz = b.upload(random_floats(rng, static_cast<std::size_t>(N) * OC));
  const auto run = [&](bool bf16) {
    const auto in = [&](std::size_t offset) {
      return bf16 ? ActivationIn::of_bf16(x16 + offset) : ActivationIn(x32 + offset);
    };
    float *dgelu = b.zeros(n), *dpre = b.zeros(static_cast<std::size_t>(N) * C), *dgate = b.zeros(n), *dup = b.zeros(n);
    backend.gelu_backward(dgelu, in(0), dy, n, b.stream());
    backend.matmul_backward_input_dgelu(dpre, dz, w, in(0), N, C, OC, b.stream());
    backend.swiglu_backward(dgate, dup, dy, in(0), in(n), n, b.stream());
    std::vector<float> all = b.download(dgelu, n);
    const std::size_t npre = static_cast<std::size_t>(N) * C;
    for (const auto& part : {b.download(dpre, npre), b.download(dgate, n), b.download(dup, n)})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  expect_same_bits(run(true), run(false), "gelu/swiglu backward on bf16 inputs");
}

// Under bf16 compute: matmul_forward, matmul_backward's weight gradient and matmul_gelu_forward
// on a bf16 input give the bits they give on the fp32 input it is the rounding of.
inline void expect_bf16_gemm_inputs_change_no_bit(Backend& backend) {
  ASSERT_EQ(backend.compute_precision(), DType::BF16);
  for (OpKind op : {OpKind::MatmulForward, OpKind::MatmulBackward, OpKind::MatmulGeluForward})
    ASSERT_TRUE(backend.supports(op, DType::BF16)) << op_kind_name(op);
  const int N = 11, C = 40, OC = 24;
  const std::size_t nx = static_cast<std::size_t>(N) * C, ny = static_cast<std::size_t>(N) * OC;
  std::mt19937 rng(20261207u);
  Buffers b(backend);
  const std::vector<float> x_host = random_floats(rng, nx);
  float* x = b.upload(x_host);
  std::uint16_t* x16 = b.bf16(nx);
  backend.cast_to_bf16(x16, x, nx, b.stream());
  const std::size_t nw = static_cast<std::size_t>(OC) * C;
  const float *w = b.upload(random_floats(rng, nw)), *bias = b.upload(random_floats(rng, OC));
  const float* dy = b.upload(random_floats(rng, ny));
  const auto run = [&](ActivationIn in) {
    float *y = b.zeros(ny), *pre = b.zeros(ny), *gelu = b.zeros(ny), *dw = b.zeros(nw);
    float* dx = b.zeros(nx);
    backend.matmul_forward(y, in, w, bias, N, C, OC, b.stream());
    backend.matmul_gelu_forward(pre, gelu, in, w, bias, N, C, OC, b.stream());
    backend.matmul_backward(dx, dw, nullptr, dy, in, w, N, C, OC, b.stream());
    std::vector<float> all = b.download(y, ny);
    for (const auto& part : {b.download(pre, ny), b.download(gelu, ny), b.download(dw, nw), b.download(dx, nx)})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  expect_same_bits(run(ActivationIn::of_bf16(x16)), run(x), "matmul outputs on a bf16 input");
  // The fp32 input really differs from its rounding (else the check above would show nothing).
  const std::vector<std::uint16_t> bits = b.download(x16, nx);
  std::size_t rounded = 0;
  for (std::size_t i = 0; i < nx; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
    float widened;
    std::memcpy(&widened, &u, sizeof widened);
    rounded += widened != x_host[i];
  }
  EXPECT_GT(rounded, nx / 2);
}

}  // namespace pipelane::bf16_buffers_test
