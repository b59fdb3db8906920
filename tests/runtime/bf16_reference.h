// The double-precision reference of bf16 compute for the cases of bf16_compute_cases.h.
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
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tests/runtime/bf16_compute_cases.h"

namespace pipelane::bf16_test {

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
