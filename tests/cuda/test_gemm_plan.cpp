// The cuBLASLt calls of plans/gemm_plan.h, executed by a column-major GEMM interpreter, against
// the row-major double reference and the CPU ops: this proves transposes, leading dimensions,
// batch strides and epilogues on the CPU. fp32: the interpreter sums in double and rounds once,
// so the difference is the CPU sgemm's own rounding (k terms): NMSE limit 1e-11. bf16: inputs and
// outputs rounded to bf16 (kBf16Nmse and llm.c's elementwise test).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/cuda/plans/gemm_plan.h"
#include "runtime/cpu/cpu_ops.h"
#include "tests/cuda/compare.h"
#include "runtime/cuda/emu/gemm_interpreter.h"
#include "tests/runtime/reference_ops.h"

namespace pipelane::cuda_test {
namespace {

using cuda::DataType;
using cuda_emu::bf16_bits_to_float;
using cuda_emu::float_to_bf16_bits;
using cuda_emu::run_gemm;
using cuda_emu::gelu;
using cuda_emu::gelu_derivative;
using cuda::Epilogue;
using cuda::Trans;

constexpr double kNmse = 1e-11;
constexpr double kBf16Nmse = 1e-4;

// A buffer in fp32 or bf16 storage holding given values (rounded), read back as doubles.
struct Buffer {
  DataType type;
  std::vector<float> f32;
  std::vector<std::uint16_t> b16;
  Buffer(DataType t, const Vec& values) : type(t) {
    if (t == DataType::F32)
      f32.assign(values.begin(), values.end());
    else
      for (double v : values) b16.push_back(float_to_bf16_bits(static_cast<float>(v)));
  }
  Buffer(DataType t, std::size_t n) : Buffer(t, Vec(n, 0.0)) {}
  void* data() { return type == DataType::F32 ? static_cast<void*>(f32.data()) : b16.data(); }
  Vec values() const {
    Vec v;
    if (type == DataType::F32)
      v.assign(f32.begin(), f32.end());
    else
      for (auto b : b16) v.push_back(bf16_bits_to_float(b));
    return v;
  }
  std::vector<float> floats() const {
    const Vec v = values();
    return std::vector<float>(v.begin(), v.end());
  }
};

Vec random_vec(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<double> d(0.0, 1.0);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

::testing::AssertionResult close(const std::string& what, const Vec& got, const Vec& want,
                                 DataType t) {
  return t == DataType::BF16 ? compare(what, got, want, Tolerance{kBf16Nmse}, true)
                             : compare(what, got, want, Tolerance{kNmse}, false);
}

struct Shape {
  int N, C, OC;
};
// Odd widths; widths that are multiples of 8 (the fused GeLU needs them: C backward, OC forward).
const Shape kShapes[] = {{5, 7, 3}, {1, 33, 65}, {17, 16, 8}, {3, 24, 40}};
const DataType kTypes[] = {DataType::F32, DataType::BF16};

TEST(GemmPlan, LinearForwardFields) {
  // What cuBLASLt is asked for out[4,3] = inp[4,5] @ weight[3,5]^T + bias.
  float out = 0, inp = 0, weight = 0, bias = 0;  // only their addresses matter
  const cuda::GemmCall g =
      cuda::matmul_forward_gemm(&out, &inp, &weight, &bias, 4, 5, 3, DataType::F32);
  EXPECT_EQ(g.transa, Trans::T);
  EXPECT_EQ(g.transb, Trans::N);
  EXPECT_EQ(g.m, 3);
  EXPECT_EQ(g.n, 4);
  EXPECT_EQ(g.k, 5);
  EXPECT_EQ(g.a.ptr, &weight);
  EXPECT_EQ(g.a.ld, 5);
  EXPECT_EQ(g.b.ptr, &inp);
  EXPECT_EQ(g.b.ld, 5);
  EXPECT_EQ(g.d, &out);
  EXPECT_EQ(g.c.ld, 3);
  EXPECT_EQ(g.epilogue, Epilogue::Bias);
  EXPECT_EQ(g.beta, 0.0f);
}

// bf16 compute on fp32 storage (GemmTypes{BF16, F32}): A and B bf16, C, D and the bias fp32, and
// the interpreter reads the operands as bf16 and writes fp32: the exact sum over the bf16 values
// rounded once to fp32 (within one fp32 rounding of the double reference).
TEST(GemmPlan, Bf16OperandsIntoFp32Outputs) {
  const int N = 5, C = 24, OC = 7;
  std::mt19937 rng(3);
  const Vec x = random_vec(rng, N * C), w = random_vec(rng, OC * C), bias = random_vec(rng, OC);
  Buffer xb(DataType::BF16, x), wb(DataType::BF16, w), biasf(DataType::F32, bias), out(DataType::F32, N * OC);
  const cuda::GemmCall g = cuda::matmul_forward_gemm(out.data(), xb.data(), wb.data(), biasf.data(), N, C, OC,
                                                     cuda::GemmTypes{DataType::BF16, DataType::F32});
  EXPECT_EQ(g.a.type, DataType::BF16);
  EXPECT_EQ(g.b.type, DataType::BF16);
  EXPECT_EQ(g.c.type, DataType::F32);
  EXPECT_EQ(g.bias_type, DataType::F32);
  run_gemm(g);
  const Vec xr = xb.values(), wr = wb.values(), br = biasf.values(), got = out.values();
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double want = br[o];
      for (int c = 0; c < C; ++c) want += xr[n * C + c] * wr[o * C + c];
      EXPECT_NEAR(got[n * OC + o], want, 0x1p-24 * std::fabs(want) + 1e-30) << n << "," << o;
    }
  // The operands really are bf16: their values differ from the fp32 inputs.
  EXPECT_NE(xr, x);
}

TEST(GemmPlan, LinearForwardWithBiasAndGelu) {
  for (const DataType t : kTypes)
    for (const auto [N, C, OC] : kShapes)
      for (const bool with_bias : {false, true})
        for (const bool with_gelu : {false, cuda::gelu_epilogue_fits(OC)}) {
          SCOPED_TRACE(::testing::Message()
                       << to_string(t) << " N=" << N << " C=" << C << " OC=" << OC
                       << " bias=" << with_bias << " gelu=" << with_gelu);
          std::mt19937 rng(N * 100 + C);
          Buffer inp(t, random_vec(rng, static_cast<std::size_t>(N) * C));
          Buffer weight(t, random_vec(rng, static_cast<std::size_t>(OC) * C));
          Buffer bias(t, random_vec(rng, OC));
          Buffer out(t, static_cast<std::size_t>(N) * OC), pre(t, static_cast<std::size_t>(N) * OC);
          run_gemm(cuda::matmul_forward_gemm(out.data(), inp.data(), weight.data(),
                                             with_bias ? bias.data() : nullptr, N, C, OC, t,
                                             with_gelu ? pre.data() : nullptr));
          const Vec want_pre = ref::matmul(inp.values(), weight.values(),
                                           with_bias ? bias.values() : Vec{}, N, C, OC);
          if (with_gelu) {
            EXPECT_TRUE(close("pre-activation", pre.values(), want_pre, t));
            EXPECT_TRUE(close("out", out.values(), ref::gelu(want_pre), t));
          } else {
            EXPECT_TRUE(close("out", out.values(), want_pre, t));
          }
          if (t == DataType::F32) {
            std::vector<float> cpu_out(static_cast<std::size_t>(N) * OC), cpu_gelu(cpu_out.size());
            cpu::matmul_forward(cpu_out.data(), inp.f32.data(), weight.f32.data(),
                                with_bias ? bias.f32.data() : nullptr, N, C, OC);
            cpu::gelu_forward(cpu_gelu.data(), cpu_out.data(), cpu_gelu.size());
            EXPECT_TRUE(close("out vs cpu", out.values(),
                              with_gelu ? Vec(cpu_gelu.begin(), cpu_gelu.end())
                                        : Vec(cpu_out.begin(), cpu_out.end()),
                              t));
          }
        }
}

TEST(GemmPlan, LinearBackward) {
  for (const DataType t : kTypes)
    for (const auto [N, C, OC] : kShapes)
      for (const bool fused : {false, cuda::gelu_epilogue_fits(C)}) {
        SCOPED_TRACE(::testing::Message() << to_string(t) << " N=" << N << " C=" << C
                                          << " OC=" << OC << " fused dgelu/bgrad=" << fused);
        std::mt19937 rng(N * 300 + OC);
        Buffer inp(t, random_vec(rng, static_cast<std::size_t>(N) * C));  // = gelu(pre) when fused
        Buffer pre(t, random_vec(rng, static_cast<std::size_t>(N) * C));
        Buffer weight(t, random_vec(rng, static_cast<std::size_t>(OC) * C));
        Buffer dout(t, random_vec(rng, static_cast<std::size_t>(N) * OC));
        const Vec dw0 = random_vec(rng, static_cast<std::size_t>(OC) * C);
        Buffer dinp(t, static_cast<std::size_t>(N) * C), dweight(DataType::F32, dw0);
        Buffer dbias(DataType::F32, OC);
        run_gemm(cuda::matmul_backward_input_gemm(dinp.data(), dout.data(), weight.data(), N, C, OC,
                                                  t, fused ? pre.data() : nullptr));
        run_gemm(cuda::matmul_backward_weight_gemm(dweight.f32.data(), dout.data(), inp.data(), N,
                                                   C, OC, t, fused ? dbias.f32.data() : nullptr));
        // Row-major reference: dinp = dout @ weight (times gelu'(pre)), dweight += dout^T @ inp,
        // dbias = column sums of dout.
        const Vec d = dout.values(), w = weight.values(), x = inp.values(), p = pre.values();
        Vec want_dinp(static_cast<std::size_t>(N) * C, 0.0), want_dw = dw0, want_db(OC, 0.0);
        for (int n = 0; n < N; ++n)
          for (int o = 0; o < OC; ++o) {
            const double g = d[static_cast<std::size_t>(n) * OC + o];
            want_db[o] += g;
            for (int c = 0; c < C; ++c) {
              want_dinp[static_cast<std::size_t>(n) * C + c] +=
                  g * w[static_cast<std::size_t>(o) * C + c];
              want_dw[static_cast<std::size_t>(o) * C + c] +=
                  g * x[static_cast<std::size_t>(n) * C + c];
            }
          }
        if (fused)
          for (std::size_t i = 0; i < want_dinp.size(); ++i) want_dinp[i] *= gelu_derivative(p[i]);
        EXPECT_TRUE(close("dinp", dinp.values(), want_dinp, t));
        EXPECT_TRUE(close("dweight", dweight.values(), want_dw, DataType::F32));
        if (fused) {
          EXPECT_TRUE(close("dbias", dbias.values(), want_db, DataType::F32));
        }
        if (t == DataType::F32) {
          std::vector<float> cdinp(want_dinp.size()), cdw(dw0.begin(), dw0.end()), cdb(OC, 0.f);
          cpu::matmul_backward(cdinp.data(), cdw.data(), cdb.data(), dout.f32.data(),
                               inp.f32.data(), weight.f32.data(), N, C, OC);
          if (fused) {
            std::vector<float> dpre(cdinp.size());
            cpu::gelu_backward(dpre.data(), pre.f32.data(), cdinp.data(), dpre.size());
            cdinp = dpre;
            EXPECT_TRUE(close("dbias vs cpu", dbias.values(), Vec(cdb.begin(), cdb.end()), t));
          }
          EXPECT_TRUE(close("dinp vs cpu", dinp.values(), Vec(cdinp.begin(), cdinp.end()), t));
          EXPECT_TRUE(close("dweight vs cpu", dweight.values(), Vec(cdw.begin(), cdw.end()), t));
        }
      }
}

TEST(GemmPlan, GeluEpilogueNeedsWidthsOfEight) {
  float x = 0;
  EXPECT_THROW(cuda::matmul_forward_gemm(&x, &x, &x, nullptr, 2, 8, 12, DataType::F32, &x),
               std::invalid_argument);
  EXPECT_THROW(cuda::matmul_backward_input_gemm(&x, &x, &x, 2, 12, 8, DataType::F32, &x),
               std::invalid_argument);
  EXPECT_NO_THROW(cuda::matmul_forward_gemm(&x, &x, &x, nullptr, 2, 12, 16, DataType::F32, &x));
}

// q, k, v [BNH, T, hs] (row-major per r): the four GEMMs of attention against row-major loops.
TEST(GemmPlan, AttentionBatchedGemms) {
  struct AShape {
    int BNH, T, hs;
  };
  for (const DataType t : kTypes)
    for (const auto [BNH, T, hs] : {AShape{3, 5, 4}, AShape{2, 1, 7}, AShape{4, 9, 16}}) {
      SCOPED_TRACE(::testing::Message()
                   << to_string(t) << " BNH=" << BNH << " T=" << T << " hs=" << hs);
      std::mt19937 rng(BNH * 10 + T);
      const std::size_t nq = static_cast<std::size_t>(BNH) * T * hs,
                        na = static_cast<std::size_t>(BNH) * T * T;
      Buffer q(t, random_vec(rng, nq)), k(t, random_vec(rng, nq)), v(t, random_vec(rng, nq));
      Buffer att(t, random_vec(rng, na)), dy(t, random_vec(rng, nq)), dpre(t, random_vec(rng, na));
      Buffer preatt(t, na), y(t, nq), datt(t, na), dv(t, nq), dq(t, nq), dk(t, nq);
      run_gemm(cuda::attention_scores_gemm(preatt.data(), q.data(), k.data(), BNH, T, hs, t));
      run_gemm(cuda::attention_values_gemm(y.data(), att.data(), v.data(), BNH, T, hs, t));
      for (const auto& g : cuda::attention_values_backward_gemms(
               datt.data(), dv.data(), dy.data(), att.data(), v.data(), BNH, T, hs, t))
        run_gemm(g);
      for (const auto& g : cuda::attention_scores_backward_gemms(dq.data(), dk.data(), dpre.data(),
                                                                 q.data(), k.data(), BNH, T, hs, t))
        run_gemm(g);
      const Vec Q = q.values(), K = k.values(), V = v.values(), A = att.values(), DY = dy.values(),
                P = dpre.values();
      Vec wpre(na, 0.0), wy(nq, 0.0), wdatt(na, 0.0), wdv(nq, 0.0), wdq(nq, 0.0), wdk(nq, 0.0);
      const auto X = [&](std::size_t r, int i, int d) {
        return r * T * hs + static_cast<std::size_t>(i) * hs + d;
      };
      const auto S = [&](std::size_t r, int i, int j) {
        return r * T * T + static_cast<std::size_t>(i) * T + j;
      };
      for (std::size_t r = 0; r < static_cast<std::size_t>(BNH); ++r)
        for (int i = 0; i < T; ++i)
          for (int j = 0; j < T; ++j)
            for (int d = 0; d < hs; ++d) {
              wpre[S(r, i, j)] += Q[X(r, i, d)] * K[X(r, j, d)];
              wy[X(r, i, d)] += A[S(r, i, j)] * V[X(r, j, d)];
              wdatt[S(r, i, j)] += DY[X(r, i, d)] * V[X(r, j, d)];
              wdv[X(r, j, d)] += A[S(r, i, j)] * DY[X(r, i, d)];
              wdq[X(r, i, d)] += P[S(r, i, j)] * K[X(r, j, d)];
              wdk[X(r, j, d)] += P[S(r, i, j)] * Q[X(r, i, d)];
            }
      EXPECT_TRUE(close("preatt", preatt.values(), wpre, t));
      EXPECT_TRUE(close("y", y.values(), wy, t));
      EXPECT_TRUE(close("datt", datt.values(), wdatt, t));
      EXPECT_TRUE(close("dv", dv.values(), wdv, t));
      EXPECT_TRUE(close("dq", dq.values(), wdq, t));
      EXPECT_TRUE(close("dk", dk.values(), wdk, t));
    }
}

}  // namespace
}  // namespace pipelane::cuda_test
