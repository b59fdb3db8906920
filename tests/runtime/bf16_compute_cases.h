// The matmul family in bf16 compute mode (runtime/backend.h) on fixed random inputs, run through
// any Backend's op table, and the checks of its outputs against the reference of bf16 compute
// (bf16_reference.h: each GEMM output as the exact sum over bf16-rounded operands, with a bound
// derived per element). tests/runtime/test_ops_bf16.cpp checks the CPU backend with them,
// tests/cuda/test_cuda_autocast.cpp the emulated (or real) CUDA backend, also against the CPU.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace pipelane::bf16_test {

constexpr double kU = 0x1p-24;       // fp32 unit roundoff
constexpr double kExpError = 2.2e-7;  // the CPU's exp_approx (runtime/cpu/fast_math.h: < 2e-7)

// Nearest bf16 (ties to even) of a float, as a double.
inline double bf(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  u = (u + 0x7fffu + lsb) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

// One bf16 ulp at v when v (the reference) lies within `fp32_error` of a bf16 rounding midpoint,
// so that the op's fp32 value of it may round the other way; else 0.
inline double flip_allowance(double v, double fp32_error) {
  const float f = static_cast<float>(v);
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, sizeof lo);
  std::memcpy(&hi, &hi_bits, sizeof hi);
  const double mid = 0.5 * (static_cast<double>(lo) + hi), ulp = std::fabs(static_cast<double>(hi) - lo);
  // The float conversion of v itself is within u|v| of v.
  return std::fabs(v - mid) <= fp32_error + kU * std::fabs(v) ? ulp : 0.0;
}

// A reference tensor: the value, a bound on |got - value| and the sum of its terms' magnitudes.
struct Bounded {
  std::vector<double> value, bound, magnitude;
  explicit Bounded(std::size_t n = 0) : value(n, 0.0), bound(n, 0.0), magnitude(n, 0.0) {}
};

// got within `factor` x the bound of every element (factor 2: two ops checked against each other,
// each within the bound of the reference). Reports the first few offenders.
inline void expect_within(const std::vector<float>& got, const Bounded& want, const std::string& what,
                          double factor = 1.0) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want.value[i]);
    if (!(err <= factor * want.bound[i] + 1e-30)) {
      if (++bad <= 3)
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", reference " << want.value[i] << ", error " << err
                      << " > bound " << factor * want.bound[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements outside the bound";
}

// The same check between two ops' outputs, with the sum of both bounds.
inline void expect_close_to(const std::vector<float>& got, const std::vector<float>& other, const Bounded& want,
                            const std::string& what) {
  ASSERT_EQ(got.size(), other.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - other[i]) <= 2.0 * want.bound[i] + 1e-30) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << " vs " << other[i] << ", bound " << 2 * want.bound[i];
  EXPECT_EQ(bad, 0) << what;
}

// llm.c's bf16 check against the fp32 op: |a - b| <= atol + 0.079 |b|, with atol = `levels` x
// 2^-7 x the largest term magnitude of the tensor: rounding both operands of a product to bf16
// changes it by at most (2 * 2^-8 + 2^-16) < 2^-7 of its magnitude, once per GEMM that an output
// passes through (levels 2 for outputs whose GEMM reads another bf16 GEMM's rounded result).
inline void expect_llmc_close(const std::vector<float>& bf16, const std::vector<float>& fp32, const Bounded& terms,
                              int levels, const std::string& what) {
  const double atol =
      levels * 0x1p-7 * 1.01 * *std::max_element(terms.magnitude.begin(), terms.magnitude.end());
  int bad = 0;
  for (std::size_t i = 0; i < bf16.size(); ++i)
    if (!(std::fabs(bf16[i] - fp32[i]) <= atol + 0.079 * std::fabs(fp32[i])) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: bf16 " << bf16[i] << " vs fp32 " << fp32[i] << ", atol " << atol;
  EXPECT_EQ(bad, 0) << what;
}

// ---- the cases: sizes, inputs ----

struct Sizes {
  int N = 24, C = 40, OC = 36;               // nn.Linear
  int B = 2, T = 8, AC = 32, NH = 4;         // attention (head size 8)
  int HN = 12, HC = 32, V = 50, Vp = 64;     // the LM head
  float grad_scale = 1.0f / 12;
};

struct Inputs {
  Sizes s;
  std::vector<float> x, w, bias, dout, dw0, db0;   // nn.Linear
  std::vector<float> qkv, att, adout;              // attention (att: the backward's input)
  std::vector<float> hx, wte;                      // the head
  std::vector<std::int32_t> targets;
};

inline std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The causal softmax of the attention scores of bf16-rounded q, k (double), [B, NH, T, T].
inline std::vector<double> reference_probabilities(const std::vector<float>& qkv, const Sizes& s) {
  const int hs = s.AC / s.NH, C3 = 3 * s.AC;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> att(static_cast<std::size_t>(s.B) * s.NH * s.T * s.T, 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.T; ++i) {
        double* row = &att[((static_cast<std::size_t>(b) * s.NH + h) * s.T + i) * s.T];
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int e = 0; e < hs; ++e)
            d += bf(qkv[(b * s.T + i) * C3 + h * hs + e]) * bf(qkv[(b * s.T + j) * C3 + s.AC + h * hs + e]);
          row[j] = d * scale;
          mx = std::max(mx, row[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += row[j] = std::exp(row[j] - mx);
        for (int j = 0; j <= i; ++j) row[j] /= sum;
      }
  return att;
}

inline Inputs make_inputs(std::uint32_t seed = 11, const Sizes& sizes = {}) {
  std::mt19937 rng(seed);
  Inputs in;
  in.s = sizes;
  const Sizes& s = in.s;
  in.x = random_floats(rng, static_cast<std::size_t>(s.N) * s.C, 1.0f);
  in.w = random_floats(rng, static_cast<std::size_t>(s.OC) * s.C, 0.5f);
  in.bias = random_floats(rng, s.OC, 0.5f);
  in.dout = random_floats(rng, static_cast<std::size_t>(s.N) * s.OC, 1.0f);
  in.dw0 = random_floats(rng, static_cast<std::size_t>(s.OC) * s.C, 0.1f);
  in.db0 = random_floats(rng, s.OC, 0.1f);
  in.qkv = random_floats(rng, static_cast<std::size_t>(s.B) * s.T * 3 * s.AC, 1.5f);
  for (double p : reference_probabilities(in.qkv, s)) in.att.push_back(static_cast<float>(p));
  in.adout = random_floats(rng, static_cast<std::size_t>(s.B) * s.T * s.AC, 1.0f);
  in.hx = random_floats(rng, static_cast<std::size_t>(s.HN) * s.HC, 1.0f);
  in.wte = random_floats(rng, static_cast<std::size_t>(s.Vp) * s.HC, 0.5f);
  std::uniform_int_distribution<int> tok(0, s.V - 1);
  for (int n = 0; n < s.HN; ++n) in.targets.push_back(tok(rng));
  return in;
}

// ---- running them on a backend ----

struct Outputs {
  std::map<std::string, std::vector<float>> t;
  double head_sum = 0, head_vp_sum = 0;
};

// The bits of bf(f): the top half of the rounded float.
inline std::uint16_t bf16_bits(float f) {
  const float r = static_cast<float>(bf(f));
  std::uint32_t u;
  std::memcpy(&u, &r, sizeof u);
  return static_cast<std::uint16_t>(u >> 16);
}

// How run_ops hands the GEMMs their weights (w, wte): fp32, or rounded on the host into bf16
// buffers (GemmWeight::of_bf16, what `[train] gemm_weights = bf16` copies).
enum class WeightsAs { F32, Bf16 };

// Every op of the matmul family once (nn.Linear forward and backward, its input-only backward,
// attention forward and backward, the head's logits, fused cross-entropy and its vocab-parallel
// form over a group of one; with `fused`, also the GeLU-fused pair, whose outputs are "gelu.*"),
// in the backend's memory.
inline Outputs run_ops(Backend& backend, const Inputs& in, WeightsAs weights = WeightsAs::F32, bool fused = false) {
  const Sizes& s = in.s;
  auto stream = backend.create_stream(StreamPriority::High);
  auto arena = backend.create_arena("bf16 op cases", std::size_t{16} << 20);
  const auto up = [&](const std::vector<float>& h) {
    float* p = arena->allocate_n<float>(std::max<std::size_t>(h.size(), 1));
    backend.copy(p, h.data(), h.size() * sizeof(float), *stream);
    return p;
  };
  const auto zeros = [&](std::size_t n) { return up(std::vector<float>(n, 0.0f)); };
  // A GEMM weight as `weights` says.
  const auto weight = [&](const std::vector<float>& h) -> GemmWeight {
    if (weights == WeightsAs::F32) return up(h);
    std::vector<std::uint16_t> bits(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) bits[i] = bf16_bits(h[i]);
    std::uint16_t* p = arena->allocate_n<std::uint16_t>(std::max<std::size_t>(h.size(), 1));
    backend.copy(p, bits.data(), bits.size() * sizeof(std::uint16_t), *stream);
    return GemmWeight::of_bf16(p);
  };
  Outputs o;
  const auto down = [&](const std::string& name, const float* p, std::size_t n) {
    std::vector<float> h(n);
    backend.copy(h.data(), p, n * sizeof(float), *stream);
    stream->synchronize();
    o.t[name] = std::move(h);
  };
  const std::size_t nx = in.x.size(), nw = in.w.size(), nout = in.dout.size();
  float *x = up(in.x), *bias = up(in.bias), *dout = up(in.dout);
  const GemmWeight w = weight(in.w);
  float *out = zeros(nout), *dinp = zeros(nx), *dinp2 = zeros(nx), *dw = up(in.dw0), *db = up(in.db0);
  backend.matmul_forward(out, x, w, bias, s.N, s.C, s.OC, *stream);
  backend.matmul_backward(dinp, dw, db, dout, x, w, s.N, s.C, s.OC, *stream);
  backend.matmul_backward_input(dinp2, dout, w, s.N, s.C, s.OC, *stream);
  down("matmul.out", out, nout);
  down("matmul.dinp", dinp, nx);
  down("matmul.dinp_only", dinp2, nx);
  down("matmul.dweight", dw, nw);
  down("matmul.dbias", db, in.db0.size());
  if (fused) {  // the MLP's pair: c_fc with its GeLU forward, c_proj's input gradient through it
    float *pre = zeros(nout), *act = zeros(nout), *dpre = zeros(nx);
    backend.matmul_gelu_forward(pre, act, x, w, bias, s.N, s.C, s.OC, *stream);
    backend.matmul_backward_input_dgelu(dpre, dout, w, x, s.N, s.C, s.OC, *stream);
    down("gelu.pre", pre, nout);
    down("gelu.out", act, nout);
    down("gelu.dpre", dpre, nx);
  }

  const std::size_t na = in.att.size(), ny = in.adout.size();
  float *qkv = up(in.qkv), *att_in = up(in.att), *adout = up(in.adout);
  float *y = zeros(ny), *att = zeros(na), *dqkv = zeros(in.qkv.size());
  backend.attention_forward(y, att, qkv, s.B, s.T, s.AC, s.NH, *stream);
  backend.attention_backward(dqkv, adout, qkv, y, att_in, s.B, s.T, s.AC, s.NH, *stream);
  down("attention.out", y, ny);
  down("attention.att", att, na);
  down("attention.dqkv", dqkv, in.qkv.size());

  const std::size_t nlog = static_cast<std::size_t>(s.HN) * s.Vp;
  float *hx = up(in.hx), *logits = zeros(nlog);
  const GemmWeight wte = weight(in.wte);
  std::int32_t* targets = arena->allocate_n<std::int32_t>(in.targets.size());
  backend.copy(targets, in.targets.data(), in.targets.size() * sizeof(std::int32_t), *stream);
  backend.lm_head_logits(logits, hx, wte, s.HN, s.HC, s.Vp, *stream);
  down("head.logits", logits, nlog);
  float *losses = zeros(s.HN), *dx = zeros(in.hx.size()), *dwte = zeros(in.wte.size());
  float* scratch = zeros(backend.lm_head_scratch_floats(s.HN, s.Vp));
  o.head_sum = backend.lm_head_cross_entropy(losses, dx, dwte, hx, wte, targets, s.HN, s.HC, s.V, s.Vp, s.grad_scale,
                                             scratch, *stream);
  down("head.losses", losses, s.HN);
  down("head.dx", dx, in.hx.size());
  down("head.dwte", dwte, in.wte.size());
  float *vlosses = zeros(s.HN), *vdx = zeros(in.hx.size()), *vdwte = zeros(in.wte.size());
  float* vscratch = zeros(backend.lm_head_vocab_parallel_scratch_floats(s.HN, s.Vp));
  const GroupReduce one_rank{[](float*, std::size_t) {}, [](float*, std::size_t) {}};
  o.head_vp_sum = backend.lm_head_cross_entropy_vocab_parallel(vlosses, vdx, vdwte, hx, wte, targets, s.HN, s.HC,
                                                               s.V, 0, s.Vp, s.grad_scale, vscratch, one_rank,
                                                               *stream);
  down("head_vp.losses", vlosses, s.HN);
  down("head_vp.dx", vdx, in.hx.size());
  down("head_vp.dwte", vdwte, in.wte.size());
  return o;
}

// A bf16 weight (GemmWeight::of_bf16) holds the values a bf16 GEMM rounds an fp32 weight to, so
// every GEMM-weight op of `backend` (bf16 compute) gives the same bits with either. run_ops with
// `fused` runs each op reads_gemm_weight names (the three matmuls, the GeLU-fused pair, the head's
// three), and supports(op, BF16) must say yes to exactly those, the casts, the attention's bf16
// activations, the norms' bf16 outputs and their backward's bf16 inputs, GeLU's and SwiGLU's bf16
// outputs and their backward's bf16 inputs (op table cases): no op claims bf16 buffers without a
// case. (The matmuls' bf16 inputs: bf16_buffer_bits.h.)
inline void expect_bf16_weights_change_no_bit(Backend& backend, const Inputs& in) {
  ASSERT_EQ(backend.compute_precision(), DType::BF16);
  int gemm_weight_ops = 0;
  for (int k = 0; k < static_cast<int>(OpKind::Count); ++k) {
    const OpKind op = static_cast<OpKind>(k);
    EXPECT_EQ(backend.supports(op, DType::BF16),
              is_bf16_cast(op) || keeps_bf16_probabilities(op) || writes_bf16_norm(op) ||
                  reads_bf16_norm_input(op) || writes_bf16_activation(op) || reads_bf16_activation(op) ||
                  reads_gemm_weight(op))
        << op_kind_name(op);
    gemm_weight_ops += reads_gemm_weight(op);
  }
  EXPECT_EQ(gemm_weight_ops, 8) << "a GEMM-weight op was added: give it a case in run_ops";
  const Outputs f32 = run_ops(backend, in, WeightsAs::F32, true), b16 = run_ops(backend, in, WeightsAs::Bf16, true);
  ASSERT_EQ(f32.t.size(), b16.t.size());
  for (const auto& [name, t] : f32.t) {
    const std::vector<float>& u = b16.t.at(name);
    ASSERT_EQ(t.size(), u.size()) << name;
    EXPECT_EQ(std::memcmp(t.data(), u.data(), t.size() * sizeof(float)), 0) << name << " differs with a bf16 weight";
  }
  EXPECT_EQ(f32.head_sum, b16.head_sum);
  EXPECT_EQ(f32.head_vp_sum, b16.head_vp_sum);
}

// A backend in fp32 compute refuses a bf16 weight (it would have to widen it, and no fp32 caller
// should hand one), and says it has no bf16 case for the GEMMs (the casts, the attention's
// probabilities and the norms' outputs are storage, in any compute precision).
inline void expect_fp32_compute_refuses_bf16_weights(Backend& backend) {
  ASSERT_EQ(backend.compute_precision(), DType::F32);
  for (int k = 0; k < static_cast<int>(OpKind::Count); ++k) {
    const OpKind op = static_cast<OpKind>(k);
    EXPECT_EQ(backend.supports(op, DType::BF16),
              is_bf16_cast(op) || keeps_bf16_probabilities(op) || writes_bf16_norm(op) ||
                  reads_bf16_norm_input(op) || writes_bf16_activation(op) || reads_bf16_activation(op))
        << op_kind_name(op);
  }
  auto stream = backend.create_stream(StreamPriority::High);
  auto arena = backend.create_arena("bf16 weight refused", std::size_t{1} << 16);
  float* x = arena->allocate_n<float>(16);
  float* out = arena->allocate_n<float>(16);
  std::uint16_t* w = arena->allocate_n<std::uint16_t>(16);
  EXPECT_THROW(backend.matmul_forward(out, x, GemmWeight::of_bf16(w), nullptr, 4, 4, 4, *stream),
               std::invalid_argument);
  // A bf16 input likewise (bf16 storage's norm outputs are for bf16 GEMMs).
  EXPECT_THROW(backend.matmul_forward(out, ActivationIn::of_bf16(w), x, nullptr, 4, 4, 4, *stream),
               std::invalid_argument);
}

}  // namespace pipelane::bf16_test
