// The matmul family in bf16 compute mode (runtime/backend.h) on fixed random inputs, run through
// any Backend's op table, and a double-precision reference of what bf16 compute means: each GEMM
// output as the exact sum over bf16-rounded operands, with a per-element bound derived from the
// arithmetic (below). tests/runtime/test_ops_bf16.cpp checks the CPU backend against it,
// tests/cuda/test_cuda_autocast.cpp the emulated CUDA backend against it and against the CPU.
//
// The bounds. u = 2^-24 (fp32's unit roundoff). A product of two bf16 values (8 significant bits
// each) is exact in fp32, so a GEMM over K bf16 operand pairs accumulated in fp32 differs from the
// exact sum by at most (K + 2) u S, S = the sum of the terms' magnitudes (|init| included), in
// any order of the sum (the CPU's sgemm, the emulator's double sum rounded once). Operands that an
// op computes itself and rounds before a GEMM (the attention's dpreatt, the head's dlogits) are
// fp32 in the op and double here: where the reference value lies within the fp32 error bound of
// a bf16 rounding midpoint the two may round to neighbouring bf16 values, and the bound of every
// output that reads it grows by one bf16 ulp of that operand times its partner (flip allowance);
// elsewhere both round the same way.
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

inline Inputs make_inputs(std::uint32_t seed = 11) {
  std::mt19937 rng(seed);
  Inputs in;
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

// Every op of the matmul family once (nn.Linear forward and backward, its input-only backward,
// attention forward and backward, the head's logits, fused cross-entropy and its vocab-parallel
// form over a group of one), in the backend's memory.
inline Outputs run_ops(Backend& backend, const Inputs& in) {
  const Sizes& s = in.s;
  auto stream = backend.create_stream(StreamPriority::High);
  auto arena = backend.create_arena("bf16 op cases", std::size_t{16} << 20);
  const auto up = [&](const std::vector<float>& h) {
    float* p = arena->allocate_n<float>(std::max<std::size_t>(h.size(), 1));
    backend.copy(p, h.data(), h.size() * sizeof(float), *stream);
    return p;
  };
  const auto zeros = [&](std::size_t n) { return up(std::vector<float>(n, 0.0f)); };
  Outputs o;
  const auto down = [&](const std::string& name, const float* p, std::size_t n) {
    std::vector<float> h(n);
    backend.copy(h.data(), p, n * sizeof(float), *stream);
    stream->synchronize();
    o.t[name] = std::move(h);
  };
  const std::size_t nx = in.x.size(), nw = in.w.size(), nout = in.dout.size();
  float *x = up(in.x), *w = up(in.w), *bias = up(in.bias), *dout = up(in.dout);
  float *out = zeros(nout), *dinp = zeros(nx), *dinp2 = zeros(nx), *dw = up(in.dw0), *db = up(in.db0);
  backend.matmul_forward(out, x, w, bias, s.N, s.C, s.OC, *stream);
  backend.matmul_backward(dinp, dw, db, dout, x, w, s.N, s.C, s.OC, *stream);
  backend.matmul_backward_input(dinp2, dout, w, s.N, s.C, s.OC, *stream);
  down("matmul.out", out, nout);
  down("matmul.dinp", dinp, nx);
  down("matmul.dinp_only", dinp2, nx);
  down("matmul.dweight", dw, nw);
  down("matmul.dbias", db, in.db0.size());

  const std::size_t na = in.att.size(), ny = in.adout.size();
  float *qkv = up(in.qkv), *att_in = up(in.att), *adout = up(in.adout);
  float *y = zeros(ny), *att = zeros(na), *dqkv = zeros(in.qkv.size());
  backend.attention_forward(y, att, qkv, s.B, s.T, s.AC, s.NH, *stream);
  backend.attention_backward(dqkv, adout, qkv, att_in, s.B, s.T, s.AC, s.NH, *stream);
  down("attention.out", y, ny);
  down("attention.att", att, na);
  down("attention.dqkv", dqkv, in.qkv.size());

  const std::size_t nlog = static_cast<std::size_t>(s.HN) * s.Vp;
  float *hx = up(in.hx), *wte = up(in.wte), *logits = zeros(nlog);
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

// ---- the reference ----

struct Reference {
  std::map<std::string, Bounded> t;
  Bounded head_sum{1};
};

// out[i] = init[i] + sum_p term(i, p) over K terms; bound (K + 2) u S.
template <typename Term>
Bounded gemm_sums(std::size_t n, int K, const std::vector<float>* init, Term term) {
  Bounded r(n);
  for (std::size_t i = 0; i < n; ++i) {
    double v = init ? (*init)[i] : 0.0, mag = std::fabs(v);
    for (int p = 0; p < K; ++p) {
      const double t = term(i, p);
      v += t;
      mag += std::fabs(t);
    }
    r.value[i] = v;
    r.magnitude[i] = mag;
    r.bound[i] = (K + 2) * kU * mag;
  }
  return r;
}

inline Reference reference(const Inputs& in, const Outputs& got) {
  const Sizes& s = in.s;
  Reference r;
  // nn.Linear. The bias gradient sums the fp32 dout (a column sum, not a GEMM).
  r.t["matmul.out"] = gemm_sums(in.dout.size(), s.C + 1, nullptr, [&](std::size_t i, int p) {
    const std::size_t n = i / s.OC, oc = i % s.OC;
    return p == s.C ? static_cast<double>(in.bias[oc]) : bf(in.x[n * s.C + p]) * bf(in.w[oc * s.C + p]);
  });
  r.t["matmul.dinp"] = gemm_sums(in.x.size(), s.OC, nullptr, [&](std::size_t i, int p) {
    const std::size_t n = i / s.C, c = i % s.C;
    return bf(in.dout[n * s.OC + p]) * bf(in.w[p * s.C + c]);
  });
  r.t["matmul.dinp_only"] = r.t["matmul.dinp"];
  r.t["matmul.dweight"] = gemm_sums(in.w.size(), s.N, &in.dw0, [&](std::size_t i, int p) {
    const std::size_t oc = i / s.C, c = i % s.C;
    return bf(in.dout[p * s.OC + oc]) * bf(in.x[p * s.C + c]);
  });
  r.t["matmul.dbias"] = gemm_sums(in.db0.size(), s.N, &in.db0, [&](std::size_t i, int p) {
    return static_cast<double>(in.dout[p * s.OC + i]);
  });

  // Attention forward. att: scores from bf16 q, k (fp32 dot: (hs + 2) u of its magnitude, scaled),
  // softmax in fp32 (a score error d moves a probability by at most 2d relative; exp_approx in
  // numerator and sum; (T + 4) u for the sum, the max subtraction, divide and multiply).
  const int hs = s.AC / s.NH, C3 = 3 * s.AC, T = s.T;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  const auto q = [&](int b, int t, int h, int e) { return bf(in.qkv[(b * T + t) * C3 + h * hs + e]); };
  const auto k = [&](int b, int t, int h, int e) { return bf(in.qkv[(b * T + t) * C3 + s.AC + h * hs + e]); };
  const auto v = [&](int b, int t, int h, int e) { return bf(in.qkv[(b * T + t) * C3 + 2 * s.AC + h * hs + e]); };
  const std::vector<double> att_ref = reference_probabilities(in.qkv, s);
  Bounded att(att_ref.size());
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < T; ++i) {
        double mag_max = 0, dot_max = 0;
        for (int j = 0; j <= i; ++j) {
          double mag = 0, dot = 0;
          for (int e = 0; e < hs; ++e) {
            mag += std::fabs(q(b, i, h, e) * k(b, j, h, e));
            dot += q(b, i, h, e) * k(b, j, h, e);
          }
          mag_max = std::max(mag_max, mag);
          dot_max = std::max(dot_max, std::fabs(dot));
        }
        // The fp32 dot, its scaling and the subtraction of the row max (|s - max| <= 2 max |s|).
        const double score_error = ((hs + 2) * kU * mag_max + 4 * kU * dot_max) * scale;
        for (int j = 0; j < T; ++j) {
          const std::size_t at = ((static_cast<std::size_t>(b) * s.NH + h) * T + i) * T + j;
          att.value[at] = att_ref[at];
          // For the fp32 comparison: bf16 scores move by up to 2^-7 of their magnitude, and a
          // probability by twice its scores' move.
          att.magnitude[at] = att_ref[at] * 2 * scale * mag_max;
          att.bound[at] = att_ref[at] * (2 * score_error + 2 * kExpError + (T + 4) * kU);
        }
      }
  r.t["attention.att"] = att;
  // out = bf16(att) @ bf16(v) over the op's own probabilities.
  const std::vector<float>& att_got = got.t.at("attention.att");
  r.t["attention.out"] = gemm_sums(in.adout.size(), T, nullptr, [&](std::size_t idx, int j) {
    const int b = static_cast<int>(idx / (T * s.AC)), i = static_cast<int>(idx / s.AC % T);
    const int h = static_cast<int>(idx % s.AC) / hs, e = static_cast<int>(idx % s.AC) % hs;
    return j > i ? 0.0 : bf(att_got[((static_cast<std::size_t>(b) * s.NH + h) * T + i) * T + j]) * v(b, j, h, e);
  });

  // Attention backward on the given att. datt = dy . v (exact products, fp32 sum of hs), then
  // dpreatt = scale att (datt - sum_j att datt) in fp32: its fp32 error (first order, per term
  // below) decides the flip allowance of the bf16 dpreatt that dq and dk read.
  Bounded dqkv(in.qkv.size());
  const auto dy = [&](int b, int t, int h, int e) { return bf(in.adout[(b * T + t) * s.AC + h * hs + e]); };
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const auto P = [&](int i, int j) {
        return static_cast<double>(in.att[((static_cast<std::size_t>(b) * s.NH + h) * T + i) * T + j]);
      };
      std::vector<double> ds(T * T, 0.0), ds16(T * T, 0.0), flip(T * T, 0.0);
      for (int i = 0; i < T; ++i) {
        std::vector<double> datt(T, 0.0), datt_error(T, 0.0);
        double weighted = 0, weighted_error = 0;
        for (int j = 0; j <= i; ++j) {
          double mag = 0;
          for (int e = 0; e < hs; ++e) {
            datt[j] += dy(b, i, h, e) * v(b, j, h, e);
            mag += std::fabs(dy(b, i, h, e) * v(b, j, h, e));
          }
          datt_error[j] = (hs + 2) * kU * mag;
          weighted += P(i, j) * datt[j];
          weighted_error += P(i, j) * (datt_error[j] + 2 * kU * std::fabs(datt[j]));
        }
        weighted_error += (T + 2) * kU * std::fabs(weighted);
        for (int j = 0; j <= i; ++j) {
          const double d = P(i, j) * (datt[j] - weighted) * scale;
          const double d_error =
              P(i, j) * scale * (datt_error[j] + weighted_error + 2 * kU * std::fabs(datt[j] - weighted)) +
              3 * kU * std::fabs(d);
          ds[i * T + j] = d;
          ds16[i * T + j] = bf(static_cast<float>(d));
          flip[i * T + j] = flip_allowance(d, d_error);
        }
      }
      for (int t = 0; t < T; ++t)
        for (int e = 0; e < hs; ++e) {
          // dq[t] = sum_j ds[t,j] k[j]; dk[t] = sum_i ds[i,t] q[i]; dv[t] = sum_i att[i,t] dy[i].
          double vq = 0, mq = 0, fq = 0, vk = 0, mk = 0, fk = 0, vv = 0, mv = 0;
          for (int j = 0; j < T; ++j) {
            vq += ds16[t * T + j] * k(b, j, h, e);
            mq += std::fabs(ds16[t * T + j] * k(b, j, h, e));
            fq += flip[t * T + j] * std::fabs(k(b, j, h, e));
            vk += ds16[j * T + t] * q(b, j, h, e);
            mk += std::fabs(ds16[j * T + t] * q(b, j, h, e));
            fk += flip[j * T + t] * std::fabs(q(b, j, h, e));
            if (j >= t) {
              vv += bf(static_cast<float>(P(j, t))) * dy(b, j, h, e);
              mv += std::fabs(bf(static_cast<float>(P(j, t))) * dy(b, j, h, e));
            }
          }
          const std::size_t at = (static_cast<std::size_t>(b) * T + t) * C3 + h * hs + e;
          const double parts[3][3] = {{vq, mq, fq}, {vk, mk, fk}, {vv, mv, 0.0}};
          for (int part = 0; part < 3; ++part) {
            dqkv.value[at + part * s.AC] = parts[part][0];
            dqkv.magnitude[at + part * s.AC] = parts[part][1];
            dqkv.bound[at + part * s.AC] = (T + 2) * kU * parts[part][1] + parts[part][2];
          }
        }
    }
  r.t["attention.dqkv"] = dqkv;

  // The head. logits over bf16 x, wte; losses from them in fp32 (a logit error d moves the loss by
  // at most 2d; exp and the sum relative errors; the final subtraction and log); dlogits =
  // grad_scale (softmax - onehot) in fp32, rounded to bf16 for the dx and dwte GEMMs.
  const Bounded logits = gemm_sums(static_cast<std::size_t>(s.HN) * s.Vp, s.HC, nullptr, [&](std::size_t i, int c) {
    const std::size_t n = i / s.Vp, vv = i % s.Vp;
    return bf(in.hx[n * s.HC + c]) * bf(in.wte[vv * s.HC + c]);
  });
  r.t["head.logits"] = logits;
  Bounded losses(s.HN);
  std::vector<double> dl16(logits.value.size(), 0.0), dflip(logits.value.size(), 0.0);
  for (int n = 0; n < s.HN; ++n) {
    const double* z = &logits.value[static_cast<std::size_t>(n) * s.Vp];
    double mx = -1e300, lerr = 0;
    for (int vv = 0; vv < s.V; ++vv) {
      mx = std::max(mx, z[vv]);
      lerr = std::max(lerr, logits.bound[static_cast<std::size_t>(n) * s.Vp + vv]);
    }
    double sum = 0;
    for (int vv = 0; vv < s.V; ++vv) sum += std::exp(z[vv] - mx);
    const double loss = std::log(sum) + mx - z[in.targets[n]];
    losses.value[n] = loss;
    double logit_magnitude = 0;  // for the fp32 comparison: a loss moves by twice its logits' move
    for (int vv = 0; vv < s.V; ++vv)
      logit_magnitude = std::max(logit_magnitude, logits.magnitude[static_cast<std::size_t>(n) * s.Vp + vv]);
    losses.magnitude[n] = 2 * logit_magnitude;
    losses.bound[n] = 2 * lerr + 2 * kExpError + 4 * kU * (std::fabs(loss) + std::fabs(std::log(sum)));
    for (int vv = 0; vv < s.V; ++vv) {
      const double p = std::exp(z[vv] - mx) / sum;
      const double d = s.grad_scale * (p - (vv == in.targets[n] ? 1.0 : 0.0));
      const double d_error = s.grad_scale * p * (2 * lerr + 2 * kExpError + 4 * kU) + 2 * kU * std::fabs(d);
      dl16[static_cast<std::size_t>(n) * s.Vp + vv] = bf(static_cast<float>(d));
      dflip[static_cast<std::size_t>(n) * s.Vp + vv] = flip_allowance(d, d_error);
    }
  }
  r.t["head.losses"] = losses;
  const auto with_flips = [&](Bounded g, auto flip_term, int K) {
    for (std::size_t i = 0; i < g.value.size(); ++i)
      for (int p = 0; p < K; ++p) g.bound[i] += flip_term(i, p);
    return g;
  };
  r.t["head.dx"] = with_flips(
      gemm_sums(in.hx.size(), s.Vp, nullptr,
                [&](std::size_t i, int vv) {
                  return dl16[i / s.HC * s.Vp + vv] * bf(in.wte[static_cast<std::size_t>(vv) * s.HC + i % s.HC]);
                }),
      [&](std::size_t i, int vv) {
        return dflip[i / s.HC * s.Vp + vv] * std::fabs(bf(in.wte[static_cast<std::size_t>(vv) * s.HC + i % s.HC]));
      },
      s.Vp);
  r.t["head.dwte"] = with_flips(
      gemm_sums(in.wte.size(), s.HN, nullptr,
                [&](std::size_t i, int n) {
                  return dl16[static_cast<std::size_t>(n) * s.Vp + i / s.HC] *
                         bf(in.hx[static_cast<std::size_t>(n) * s.HC + i % s.HC]);
                }),
      [&](std::size_t i, int n) {
        return dflip[static_cast<std::size_t>(n) * s.Vp + i / s.HC] *
               std::fabs(bf(in.hx[static_cast<std::size_t>(n) * s.HC + i % s.HC]));
      },
      s.HN);
  for (const char* name : {"losses", "dx", "dwte"}) r.t[std::string("head_vp.") + name] = r.t[std::string("head.") + name];
  for (int n = 0; n < s.HN; ++n) {
    r.head_sum.value[0] += losses.value[n];
    r.head_sum.bound[0] += losses.bound[n] + (s.HN + 1) * kU * std::fabs(losses.value[n]);
  }
  return r;
}

// Outputs whose GEMM reads another rounded result (for the llm.c comparison's atol).
inline int gemm_levels(const std::string& name) {
  return name == "attention.out" || name == "attention.dqkv" || name.find(".dx") != std::string::npos ||
                 name.find(".dwte") != std::string::npos
             ? 2
             : 1;
}

}  // namespace pipelane::bf16_test
