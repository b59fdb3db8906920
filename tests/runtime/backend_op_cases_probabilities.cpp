// The ops with a bf16 activation buffer (ActivationOut/In, runtime/backend.h: bf16 storage keeps
// those values so) as op table cases: the attention ops' saved probabilities, output and q, k, v,
// MHA and GQA, the norms' forward output (LayerNorm, RMSNorm) and their backward's input, GeLU's and
// SwiGLU's output and their backward's input.
// - Forward: `out` is the fp32 buffer's (the op computes in fp32 and only rounds what it stores):
//   kReduction against the double reference. The stored probabilities are the exact ones rounded
//   once to bf16: each within 2^-8 relative (bf16's unit roundoff: 8 significant bits, rounded to
//   nearest), so their NMSE against the exact (unrounded) probabilities is at most 2^-16
//   (kOneBf16Rounding); a wrong layout, row or scale gives 1e-2..1.
// - The norms' backward reads a bf16 input made on the host (random values, rounded): the
//   reference is the finite-difference gradient in double at exactly those values, as for the
//   fp32 cases (kReduction).
// - Backward: reads the probabilities it is given. The case hands it bf16 values made on the host
//   (the double reference's, rounded), and the reference is the analytic backward in double on
//   exactly those values: only fp32 reductions separate the two (kReduction).
#include <cmath>
#include <cstring>

#include "tests/runtime/backend_op_cases.h"
#include "tests/runtime/reference_ops_llama.h"

namespace pipelane::backend_ops {

namespace {
constexpr double kReduction = 1e-10;               // as backend_op_cases.cpp
// (2^-8)^2, and 1% for fp32's own error on top. (This was (2^-9)^2, half bf16's unit roundoff: a
// typical rounding, not the worst; SwiGLU's bf16 output on the emulated CUDA backend went past it.)
constexpr double kOneBf16Rounding = 0x1p-16 * 1.01;

using ref::Vec;

// A causal attention's operands in double: q [B,T,NH*hs], k and v [B,T,KVH*hs] (query head h reads
// kv head h / (NH/KVH)); MHA is KVH = NH.
struct Heads {
  int B, T, NH, KVH, hs;
  std::size_t q_at(int b, int t, int h) const { return (static_cast<std::size_t>(b) * T + t) * NH * hs + h * hs; }
  std::size_t kv_at(int b, int t, int h) const {
    return (static_cast<std::size_t>(b) * T + t) * KVH * hs + (h / (NH / KVH)) * hs;
  }
  std::size_t p_at(int b, int h, int i, int j) const {
    return ((static_cast<std::size_t>(b) * NH + h) * T + i) * T + j;
  }
  std::size_t probabilities() const { return static_cast<std::size_t>(B) * NH * T * T; }
};

// softmax_{j<=i}(q_i . k_j / sqrt(hs)), zero above the diagonal.
Vec probabilities(const Heads& s, const Vec& q, const Vec& k) {
  Vec p(s.probabilities(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.T; ++i) {
        double top = -INFINITY, sum = 0.0;
        std::vector<double> row(static_cast<std::size_t>(i) + 1);
        for (int j = 0; j <= i; ++j) {
          double d = 0.0;
          for (int e = 0; e < s.hs; ++e) d += q[s.q_at(b, i, h) + e] * k[s.kv_at(b, j, h) + e];
          row[j] = d * scale;
          top = std::max(top, row[j]);
        }
        for (int j = 0; j <= i; ++j) sum += std::exp(row[j] - top);
        for (int j = 0; j <= i; ++j) p[s.p_at(b, h, i, j)] = std::exp(row[j] - top) / sum;
      }
  return p;
}

// The attention backward on given probabilities p: dV_j = sum_i p_ij dy_i; dp_ij = dy_i . v_j;
// ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik) / sqrt(hs); dq_i = sum_j ds_ij k_j; dk_j = sum_i ds_ij q_i.
void backward_given(const Heads& s, const Vec& p, const Vec& q, const Vec& k, const Vec& v, const Vec& dy, Vec& dq,
                    Vec& dk, Vec& dv) {
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.T; ++i) {
        std::vector<double> dp(static_cast<std::size_t>(i) + 1);
        double weighted = 0.0;
        for (int j = 0; j <= i; ++j) {
          const double pij = p[s.p_at(b, h, i, j)];
          double d = 0.0;
          for (int e = 0; e < s.hs; ++e) {
            d += dy[s.q_at(b, i, h) + e] * v[s.kv_at(b, j, h) + e];
            dv[s.kv_at(b, j, h) + e] += pij * dy[s.q_at(b, i, h) + e];
          }
          dp[j] = d;
          weighted += pij * d;
        }
        for (int j = 0; j <= i; ++j) {
          const double ds = p[s.p_at(b, h, i, j)] * (dp[j] - weighted) * scale;
          for (int e = 0; e < s.hs; ++e) {
            dq[s.q_at(b, i, h) + e] += ds * k[s.kv_at(b, j, h) + e];
            dk[s.kv_at(b, j, h) + e] += ds * q[s.q_at(b, i, h) + e];
          }
        }
      }
}

std::uint16_t bf16_bits_of(double x) {  // nearest bf16 of float(x), ties to even (finite x)
  const float f = static_cast<float>(x);
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
double bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// n bf16 values in a DeviceBuffers' float allocation (its guards after it), and back.
std::uint16_t* upload_bf16(DeviceBuffers& b, const std::vector<std::uint16_t>& bits) {
  std::vector<float> packed((bits.size() + 1) / 2, 0.f);
  std::memcpy(packed.data(), bits.data(), bits.size() * sizeof(std::uint16_t));
  return reinterpret_cast<std::uint16_t*>(b.upload(packed));
}
std::vector<float> download_bf16(DeviceBuffers& b, const std::uint16_t* device, std::size_t n) {
  const std::vector<float> packed = b.download(reinterpret_cast<const float*>(device), (n + 1) / 2);
  std::vector<std::uint16_t> bits(n);
  std::memcpy(bits.data(), packed.data(), n * sizeof(std::uint16_t));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(bf16_value(bits[i]));
  return out;
}

// The fused qkv [N, 3C] as separate q, k, v [N, C] and back.
void split_qkv(const Vec& qkv, int N, int C, Vec& q, Vec& k, Vec& v) {
  q.resize(static_cast<std::size_t>(N) * C), k.resize(q.size()), v.resize(q.size());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const std::size_t row = static_cast<std::size_t>(n) * 3 * C, at = static_cast<std::size_t>(n) * C + c;
      q[at] = qkv[row + c], k[at] = qkv[row + C + c], v[at] = qkv[row + 2 * C + c];
    }
}
Vec fuse_qkv(const Vec& q, const Vec& k, const Vec& v, int N, int C) {
  Vec qkv(static_cast<std::size_t>(N) * 3 * C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const std::size_t row = static_cast<std::size_t>(n) * 3 * C, at = static_cast<std::size_t>(n) * C + c;
      qkv[row + c] = q[at], qkv[row + C + c] = k[at], qkv[row + 2 * C + c] = v[at];
    }
  return qkv;
}

std::vector<std::uint16_t> rounded_bits(const Vec& p) {
  std::vector<std::uint16_t> bits(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) bits[i] = bf16_bits_of(p[i]);
  return bits;
}
Vec widened(const std::vector<std::uint16_t>& bits) {
  Vec p(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) p[i] = bf16_value(bits[i]);
  return p;
}

void add_mha_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int B = 2, T = 5, C = 12, NH = 3, N = B * T;
  const Heads s{B, T, NH, NH, C / NH};
  const std::vector<float> qkv = ref::random_floats(rng, static_cast<std::size_t>(N) * 3 * C);
  const std::vector<float> dout = ref::random_floats(rng, static_cast<std::size_t>(N) * C);
  Vec q, k, v;
  split_qkv(ref::to_double(qkv), N, C, q, k, v);
  const Vec exact = probabilities(s, q, k);
  const std::vector<std::uint16_t> stored = rounded_bits(exact);
  const std::size_t na = s.probabilities();
  cases.push_back({OpKind::AttentionForward, "attention_forward (bf16 probabilities)", kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* out = b.zeros(static_cast<std::size_t>(N) * C);
                     std::uint16_t* att = upload_bf16(b, std::vector<std::uint16_t>(na, 0x4040));  // overwritten
                     b.backend().attention_forward(out, ActivationOut::of_bf16(att),
                                                   b.upload(poisoned_first(qkv, poison)), B, T, C, NH, b.stream());
                     return Outputs{{"out", b.download(out, static_cast<std::size_t>(N) * C)},
                                    {"att", download_bf16(b, att, na)}};
                   },
                   [=] { return Expected{{"out", ref::attention(ref::to_double(qkv), B, T, C, NH)}, {"att", exact}}; },
                   {{"att", kOneBf16Rounding}}});
  cases.push_back({OpKind::AttentionForward, "attention_forward (bf16 output and probabilities)", kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     const std::size_t no = static_cast<std::size_t>(N) * C;
                     std::uint16_t* out = upload_bf16(b, std::vector<std::uint16_t>(no, 0x4040));  // overwritten
                     std::uint16_t* att = upload_bf16(b, std::vector<std::uint16_t>(na, 0x4040));
                     b.backend().attention_forward(ActivationOut::of_bf16(out), ActivationOut::of_bf16(att),
                                                   b.upload(poisoned_first(qkv, poison)), B, T, C, NH, b.stream());
                     return Outputs{{"out", download_bf16(b, out, no)}, {"att", download_bf16(b, att, na)}};
                   },
                   [=] { return Expected{{"out", ref::attention(ref::to_double(qkv), B, T, C, NH)}, {"att", exact}}; },
                   {{"att", kOneBf16Rounding}, {"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::AttentionBackward, "attention_backward (bf16 probabilities)", kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* dqkv = b.upload(std::vector<float>(static_cast<std::size_t>(N) * 3 * C, 5.f));
                     float* out = b.zeros(static_cast<std::size_t>(N) * C);  // read by no un-fused backward
                     b.backend().attention_backward(dqkv, b.upload(poisoned_first(dout, poison)), b.upload(qkv), out,
                                                    ActivationIn::of_bf16(upload_bf16(b, stored)), B, T, C, NH,
                                                    b.stream());
                     return Outputs{{"dqkv", b.download(dqkv, static_cast<std::size_t>(N) * 3 * C)}};
                   },
                   [=] {
                     Vec dq, dk, dv;
                     backward_given(s, widened(stored), q, k, v, ref::to_double(dout), dq, dk, dv);
                     return Expected{{"dqkv", fuse_qkv(dq, dk, dv, N, C)}};
                   }});
}

void add_gqa_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int B = 2, T = 6, NH = 4, KVH = 2, hs = 4, N = B * T;
  const Heads s{B, T, NH, KVH, hs};
  const std::size_t nq = static_cast<std::size_t>(N) * NH * hs, nkv = static_cast<std::size_t>(N) * KVH * hs;
  const std::vector<float> q = ref::random_floats(rng, nq), k = ref::random_floats(rng, nkv),
                           v = ref::random_floats(rng, nkv), dout = ref::random_floats(rng, nq);
  const Vec exact = probabilities(s, ref::to_double(q), ref::to_double(k));
  const std::vector<std::uint16_t> stored = rounded_bits(exact);
  const std::size_t na = s.probabilities();
  cases.push_back({OpKind::AttentionForwardGqa, "attention_forward_gqa (bf16 probabilities)", kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* out = b.zeros(nq);
                     std::uint16_t* att = upload_bf16(b, std::vector<std::uint16_t>(na, 0x4040));  // overwritten
                     b.backend().attention_forward_gqa(out, ActivationOut::of_bf16(att),
                                                       b.upload(poisoned_first(q, poison)), b.upload(k), b.upload(v), B,
                                                       T, NH, KVH, hs, b.stream());
                     return Outputs{{"out", b.download(out, nq)}, {"att", download_bf16(b, att, na)}};
                   },
                   [=] {
                     const Vec out = ref::attention_gqa(ref::to_double(q), ref::to_double(k), ref::to_double(v), B, T,
                                                        NH, KVH, hs);
                     return Expected{{"out", out}, {"att", exact}};
                   },
                   {{"att", kOneBf16Rounding}}});
  cases.push_back({OpKind::AttentionForwardGqa, "attention_forward_gqa (bf16 output and probabilities)", kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     std::uint16_t* out = upload_bf16(b, std::vector<std::uint16_t>(nq, 0x4040));  // overwritten
                     std::uint16_t* att = upload_bf16(b, std::vector<std::uint16_t>(na, 0x4040));
                     b.backend().attention_forward_gqa(ActivationOut::of_bf16(out), ActivationOut::of_bf16(att),
                                                       b.upload(poisoned_first(q, poison)), b.upload(k), b.upload(v), B,
                                                       T, NH, KVH, hs, b.stream());
                     return Outputs{{"out", download_bf16(b, out, nq)}, {"att", download_bf16(b, att, na)}};
                   },
                   [=] {
                     const Vec out = ref::attention_gqa(ref::to_double(q), ref::to_double(k), ref::to_double(v), B, T,
                                                        NH, KVH, hs);
                     return Expected{{"out", out}, {"att", exact}};
                   },
                   {{"att", kOneBf16Rounding}, {"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::AttentionBackwardGqa, "attention_backward_gqa (bf16 probabilities)", kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* dq = b.upload(std::vector<float>(nq, 5.f));
                     float* dk = b.upload(std::vector<float>(nkv, 5.f));
                     float* dv = b.upload(std::vector<float>(nkv, 5.f));
                     b.backend().attention_backward_gqa(dq, dk, dv, b.upload(poisoned_first(dout, poison)), b.upload(q),
                                                        b.upload(k), b.upload(v), b.zeros(nq),
                                                        ActivationIn::of_bf16(upload_bf16(b, stored)), B, T, NH, KVH,
                                                        hs, b.stream());
                     return Outputs{
                         {"dq", b.download(dq, nq)}, {"dk", b.download(dk, nkv)}, {"dv", b.download(dv, nkv)}};
                   },
                   [=] {
                     Vec dq, dk, dv;
                     backward_given(s, widened(stored), ref::to_double(q), ref::to_double(k), ref::to_double(v),
                                    ref::to_double(dout), dq, dk, dv);
                     return Expected{{"dq", dq}, {"dk", dk}, {"dv", dv}};
                   }});
}

// The norms' forward into a bf16 buffer: the output within one bf16 rounding of the double
// reference (NMSE <= 2^-16, as the probabilities), the statistics as the fp32 op's (kReduction).
void add_norm_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 7, C = 52;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const std::vector<float> x = ref::random_floats(rng, n), w = ref::random_floats(rng, C);
  const std::vector<float> b = ref::random_floats(rng, C);
  cases.push_back({OpKind::LayerNormForward, "layernorm_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = upload_bf16(d, std::vector<std::uint16_t>(n, 0x4040));  // overwritten
                     float *mean = d.zeros(N), *rstd = d.zeros(N);
                     d.backend().layernorm_forward(ActivationOut::of_bf16(out), mean, rstd,
                                                   d.upload(poisoned_first(x, poison)), d.upload(w), d.upload(b), N, C,
                                                   d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}, {"mean", d.download(mean, N)},
                                    {"rstd", d.download(rstd, N)}};
                   },
                   [=] {
                     Vec mean, rstd;
                     Vec out =
                         ref::layernorm(ref::to_double(x), ref::to_double(w), ref::to_double(b), N, C, &mean, &rstd);
                     return Expected{{"out", out}, {"mean", mean}, {"rstd", rstd}};
                   },
                   {{"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::RmsNormForward, "rmsnorm_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = upload_bf16(d, std::vector<std::uint16_t>(n, 0x4040));  // overwritten
                     float* rstd = d.zeros(N);
                     d.backend().rmsnorm_forward(ActivationOut::of_bf16(out), rstd, d.upload(poisoned_first(x, poison)),
                                                 d.upload(w), N, C, 1e-5f, d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}, {"rstd", d.download(rstd, N)}};
                   },
                   [=] {
                     Vec rstd;
                     Vec out = ref::rmsnorm(ref::to_double(x), ref::to_double(w), N, C, 1e-5, &rstd);
                     return Expected{{"out", out}, {"rstd", rstd}};
                   },
                   {{"out", kOneBf16Rounding}}});
}

// The norms' backward on a bf16 input (whole, and the two halves): the fp32 cases' gradients at
// the bf16 values. Statistics from the backend's own forward on those values widened.
void add_norm_backward_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 6, C = 40;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const std::vector<std::uint16_t> stored = rounded_bits(ref::to_double(ref::random_floats(rng, n)));
  const Vec x = widened(stored);
  const std::vector<float> x32(x.begin(), x.end());
  const std::vector<float> w = ref::random_floats(rng, C, 0.5f), bias = ref::random_floats(rng, C, 0.5f);
  const std::vector<float> dout = ref::random_floats(rng, n), acc0 = ref::random_floats(rng, n, 0.1f);
  const auto plus = [](const std::vector<float>& a, const Vec& d) {
    Vec out(d.size());
    for (std::size_t i = 0; i < d.size(); ++i) out[i] = a[i] + d[i];
    return out;
  };
  for (const bool rms : {false, true}) {
    const auto grads = [=] {
      const Vec wd = ref::to_double(w), bd = ref::to_double(bias), R = ref::to_double(dout);
      const auto norm = [&](const Vec& in, const Vec& weight) {
        return rms ? ref::rmsnorm(in, weight, N, C, 1e-5) : ref::layernorm(in, weight, bd, N, C);
      };
      Expected e{{"dinp", plus(acc0, ref::fd_gradient([&](const Vec& p) { return norm(p, wd); }, x, R))},
                 {"dweight", plus(w, ref::fd_gradient([&](const Vec& p) { return norm(x, p); }, wd, R))}};
      const auto f_b = [&](const Vec& p) { return ref::layernorm(x, wd, p, N, C); };
      if (!rms) e["dbias"] = plus(bias, ref::fd_gradient(f_b, bd, R));
      return e;
    };
    const auto run = [=](bool halves) {
      return [=](DeviceBuffers& b, bool poison) {
        const ActivationIn inp = ActivationIn::of_bf16(upload_bf16(b, stored));
        float *weight = b.upload(w), *mean = b.zeros(N), *rstd = b.zeros(N);
        float *dinp = b.upload(acc0), *dw = b.upload(w), *db = b.upload(bias);  // all three accumulate
        float* d = b.upload(poisoned_first(dout, poison));
        Backend& be = b.backend();
        if (rms) {
          be.rmsnorm_forward(b.zeros(n), rstd, b.upload(x32), weight, N, C, 1e-5f, b.stream());
          if (!halves) be.rmsnorm_backward(dinp, dw, d, inp, weight, rstd, N, C, b.stream());
          if (halves) be.rmsnorm_backward_input(dinp, d, inp, weight, rstd, N, C, b.stream());
          if (halves) be.rmsnorm_backward_params(dw, d, inp, rstd, N, C, b.stream());
          return Outputs{{"dinp", b.download(dinp, n)}, {"dweight", b.download(dw, C)}};
        }
        be.layernorm_forward(b.zeros(n), mean, rstd, b.upload(x32), weight, b.upload(bias), N, C, b.stream());
        if (!halves) be.layernorm_backward(dinp, dw, db, d, inp, weight, mean, rstd, N, C, b.stream());
        if (halves) be.layernorm_backward_input(dinp, d, inp, weight, mean, rstd, N, C, b.stream());
        if (halves) be.layernorm_backward_params(dw, db, d, inp, mean, rstd, N, C, b.stream());
        return Outputs{{"dinp", b.download(dinp, n)}, {"dweight", b.download(dw, C)}, {"dbias", b.download(db, C)}};
      };
    };
    const std::string name = rms ? "rmsnorm_backward" : "layernorm_backward";
    const OpKind whole = rms ? OpKind::RmsNormBackward : OpKind::LayerNormBackward;
    const OpKind input = rms ? OpKind::RmsNormBackwardInput : OpKind::LayerNormBackwardInput;
    const OpKind params = rms ? OpKind::RmsNormBackwardParams : OpKind::LayerNormBackwardParams;
    cases.push_back({whole, name + " (bf16 input)", kReduction, run(false), grads});
    cases.push_back({input, name + "_input + _params (bf16 input)", kReduction, run(true), grads});
    cases.push_back({params, name + "_params (after _input, bf16 input)", kReduction, run(true), grads});
  }
}

// GeLU (alone and after its GEMM) and SwiGLU into a bf16 buffer: the output within one bf16
// rounding of the double reference (kOneBf16Rounding), the GEMM's pre-activation as the fp32
// case's (kReduction). OC a multiple of 8 takes the CUDA backend's fused GeLU epilogue.
void add_activation_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 6, C = 20, OC = 24;
  const std::size_t n = static_cast<std::size_t>(N) * OC;
  const std::vector<float> x = ref::random_floats(rng, n), up = ref::random_floats(rng, n);
  const std::vector<float> in = ref::random_floats(rng, static_cast<std::size_t>(N) * C);
  const std::vector<float> w = ref::random_floats(rng, static_cast<std::size_t>(OC) * C, 0.3f);
  const std::vector<float> bias = ref::random_floats(rng, OC, 0.3f);
  const auto bf16_out = [n](DeviceBuffers& d) { return upload_bf16(d, std::vector<std::uint16_t>(n, 0x4040)); };
  cases.push_back({OpKind::GeluForward, "gelu_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = bf16_out(d);  // overwritten
                     d.backend().gelu_forward(ActivationOut::of_bf16(out), d.upload(poisoned_first(x, poison)), n,
                                              d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}};
                   },
                   [=] { return Expected{{"out", ref::gelu(ref::to_double(x))}}; }, {{"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::SwigluForward, "swiglu_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = bf16_out(d);
                     d.backend().swiglu_forward(ActivationOut::of_bf16(out), d.upload(poisoned_first(x, poison)),
                                                d.upload(up), n, d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}};
                   },
                   [=] { return Expected{{"out", ref::swiglu(ref::to_double(x), ref::to_double(up))}}; },
                   {{"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::MatmulGeluForward, "matmul_gelu_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     float* pre = d.zeros(n);
                     std::uint16_t* out = bf16_out(d);
                     d.backend().matmul_gelu_forward(pre, ActivationOut::of_bf16(out),
                                                     d.upload(poisoned_first(in, poison)), d.upload(w), d.upload(bias),
                                                     N, C, OC, d.stream());
                     return Outputs{{"pre", d.download(pre, n)}, {"out", download_bf16(d, out, n)}};
                   },
                   [=] {
                     const Vec pre = ref::matmul(ref::to_double(in), ref::to_double(w), ref::to_double(bias), N, C, OC);
                     return Expected{{"pre", pre}, {"out", ref::gelu(pre)}};
                   },
                   {{"out", kOneBf16Rounding}}});
}

// The attention ops on bf16 q, k, v with bf16 probabilities and output, as bf16 storage runs them:
// the references at exactly the bf16 values (forward: one rounding of each stored value; backward:
// the analytic backward in double on the given probabilities, kReduction).
void add_attention_input_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const int KVH : {3, 1}) {  // MHA on a fused qkv, then MQA on separate q, k, v
    const bool gqa = KVH == 1;
    const int B = 2, T = 5, NH = 3, hs = 4, C = NH * hs, N = B * T;
    const Heads s{B, T, NH, KVH, hs};
    const std::size_t nq = static_cast<std::size_t>(N) * C, nkv = static_cast<std::size_t>(N) * KVH * hs;
    const std::size_t nall = gqa ? nq + 2 * nkv : 3 * nq, na = s.probabilities();
    const std::vector<std::uint16_t> bits = rounded_bits(ref::to_double(ref::random_floats(rng, nall)));
    const Vec all = widened(bits);
    Vec q, k, v;
    if (gqa) {
      q.assign(all.begin(), all.begin() + nq);
      k.assign(all.begin() + nq, all.begin() + nq + nkv);
      v.assign(all.begin() + nq + nkv, all.end());
    } else {
      split_qkv(all, N, C, q, k, v);
    }
    const std::vector<float> dout = ref::random_floats(rng, nq);
    const Vec exact = probabilities(s, q, k);
    const std::vector<std::uint16_t> stored = rounded_bits(exact);
    const OpKind forward = gqa ? OpKind::AttentionForwardGqa : OpKind::AttentionForward;
    const OpKind backward = gqa ? OpKind::AttentionBackwardGqa : OpKind::AttentionBackward;
    const std::string name = gqa ? "attention_forward_gqa" : "attention_forward";
    cases.push_back({forward, name + " (bf16 q, k, v, output and probabilities)", kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       std::vector<std::uint16_t> in = bits;
                       if (poison) in[0] = 0x7fc0;  // a NaN
                       const std::uint16_t* x = upload_bf16(b, in);
                       std::uint16_t* out = upload_bf16(b, std::vector<std::uint16_t>(nq, 0x4040));  // overwritten
                       std::uint16_t* att = upload_bf16(b, std::vector<std::uint16_t>(na, 0x4040));
                       const auto at = [&](std::size_t offset) { return ActivationIn::of_bf16(x + offset); };
                       if (gqa)
                         b.backend().attention_forward_gqa(ActivationOut::of_bf16(out), ActivationOut::of_bf16(att),
                                                           at(0), at(nq), at(nq + nkv), B, T, NH, KVH, hs, b.stream());
                       else
                         b.backend().attention_forward(ActivationOut::of_bf16(out), ActivationOut::of_bf16(att), at(0),
                                                       B, T, C, NH, b.stream());
                       return Outputs{{"out", download_bf16(b, out, nq)}, {"att", download_bf16(b, att, na)}};
                     },
                     [=] {
                       const Vec out =
                           gqa ? ref::attention_gqa(q, k, v, B, T, NH, KVH, hs) : ref::attention(all, B, T, C, NH);
                       return Expected{{"out", out}, {"att", exact}};
                     },
                     {{"att", kOneBf16Rounding}, {"out", kOneBf16Rounding}}});
    cases.push_back({backward, (gqa ? "attention_backward_gqa" : "attention_backward") +
                                   std::string(" (bf16 q, k, v, output and probabilities)"),
                     kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       const std::uint16_t* x = upload_bf16(b, bits);
                       const std::uint16_t* out = upload_bf16(b, std::vector<std::uint16_t>(nq, 0));  // read by none
                       const ActivationIn att = ActivationIn::of_bf16(upload_bf16(b, stored));
                       const auto at = [&](std::size_t offset) { return ActivationIn::of_bf16(x + offset); };
                       const float* d = b.upload(poisoned_first(dout, poison));
                       if (gqa) {
                         float* dq = b.upload(std::vector<float>(nq, 5.f));
                         float* dk = b.upload(std::vector<float>(nkv, 5.f));
                         float* dv = b.upload(std::vector<float>(nkv, 5.f));
                         b.backend().attention_backward_gqa(dq, dk, dv, d, at(0), at(nq), at(nq + nkv),
                                                            ActivationIn::of_bf16(out), att, B, T, NH, KVH, hs,
                                                            b.stream());
                         return Outputs{{"dq", b.download(dq, nq)}, {"dk", b.download(dk, nkv)},
                                        {"dv", b.download(dv, nkv)}};
                       }
                       float* dqkv = b.upload(std::vector<float>(3 * nq, 5.f));
                       b.backend().attention_backward(dqkv, d, at(0), ActivationIn::of_bf16(out), att, B, T, C, NH,
                                                      b.stream());
                       return Outputs{{"dqkv", b.download(dqkv, 3 * nq)}};
                     },
                     [=] {
                       Vec dq, dk, dv;
                       backward_given(s, widened(stored), q, k, v, ref::to_double(dout), dq, dk, dv);
                       if (gqa) return Expected{{"dq", dq}, {"dk", dk}, {"dv", dv}};
                       return Expected{{"dqkv", fuse_qkv(dq, dk, dv, N, C)}};
                     }});
  }
}

// GeLU's backward (alone and after its GEMM) and SwiGLU's on bf16 inputs: the fp32 cases'
// references at exactly the bf16 values.
void add_activation_input_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 6, C = 16, OC = 12;  // C a multiple of 8: the CUDA backend's DGELU epilogue
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const std::vector<std::uint16_t> bits = rounded_bits(ref::to_double(ref::random_floats(rng, 2 * n)));
  const Vec all = widened(bits);
  const Vec x(all.begin(), all.begin() + n), up(all.begin() + n, all.end());
  const std::vector<float> dy = ref::random_floats(rng, n);
  const std::vector<float> dz = ref::random_floats(rng, static_cast<std::size_t>(N) * OC);
  const std::vector<float> w = ref::random_floats(rng, static_cast<std::size_t>(OC) * C, 0.3f);
  const auto bf16_input = [bits](DeviceBuffers& d, bool poison) {
    std::vector<std::uint16_t> in = bits;
    if (poison) in[0] = 0x7fc0;  // a NaN
    return upload_bf16(d, in);
  };
  cases.push_back({OpKind::GeluBackward, "gelu_backward (bf16 input)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     float* dinp = d.upload(std::vector<float>(n, 5.f));  // overwritten
                     d.backend().gelu_backward(dinp, ActivationIn::of_bf16(bf16_input(d, poison)), d.upload(dy), n,
                                               d.stream());
                     return Outputs{{"dinp", d.download(dinp, n)}};
                   },
                   [=] { return Expected{{"dinp", ref::fd_gradient(ref::gelu, x, ref::to_double(dy))}}; }});
  cases.push_back({OpKind::SwigluBackward, "swiglu_backward (bf16 gate and up)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     const std::uint16_t* in = bf16_input(d, poison);
                     float *dgate = d.upload(std::vector<float>(n, 5.f)), *dup = d.upload(std::vector<float>(n, 5.f));
                     d.backend().swiglu_backward(dgate, dup, d.upload(dy), ActivationIn::of_bf16(in),
                                                 ActivationIn::of_bf16(in + n), n, d.stream());
                     return Outputs{{"dgate", d.download(dgate, n)}, {"dup", d.download(dup, n)}};
                   },
                   [=] {
                     const Vec R = ref::to_double(dy);
                     const auto f_g = [&](const Vec& p) { return ref::swiglu(p, up); };
                     const auto f_u = [&](const Vec& p) { return ref::swiglu(x, p); };
                     return Expected{{"dgate", ref::fd_gradient(f_g, x, R)}, {"dup", ref::fd_gradient(f_u, up, R)}};
                   }});
  cases.push_back({OpKind::MatmulBackwardInputDgelu, "matmul_backward_input_dgelu (bf16 pre)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     float* dpre = d.upload(std::vector<float>(n, 5.f));  // overwritten
                     d.backend().matmul_backward_input_dgelu(dpre, d.upload(dz), d.upload(w),
                                                             ActivationIn::of_bf16(bf16_input(d, poison)), N, C, OC,
                                                             d.stream());
                     return Outputs{{"dpre", d.download(dpre, n)}};
                   },
                   [=] {
                     const Vec no_bias(OC, 0.0);
                     const auto f = [&](const Vec& p) {
                       return ref::matmul(ref::gelu(p), ref::to_double(w), no_bias, N, C, OC);
                     };
                     return Expected{{"dpre", ref::fd_gradient(f, x, ref::to_double(dz))}};
                   }});
}
}  // namespace

void add_bf16_probability_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::size_t first = cases.size();
  add_mha_cases(cases, rng);
  add_gqa_cases(cases, rng);
  add_norm_cases(cases, rng);
  add_norm_backward_cases(cases, rng);
  add_activation_cases(cases, rng);
  add_activation_input_cases(cases, rng);
  add_attention_input_cases(cases, rng);
  for (std::size_t i = first; i < cases.size(); ++i) cases[i].bf16_buffer = true;
}

}  // namespace pipelane::backend_ops
