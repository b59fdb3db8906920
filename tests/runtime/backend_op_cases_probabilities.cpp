// The attention ops with bf16 activation buffers (ActivationOut/In, runtime/backend.h: bf16
// storage keeps those values so) as op table cases: the saved probabilities, the output and q, k,
// v, MHA and GQA. (The norms' and the MLP's: backend_op_cases_bf16_activations.cpp.)
// - Forward: `out` is the fp32 buffer's (the op computes in fp32 and only rounds what it stores):
//   kReduction against the double reference. The stored probabilities are the exact ones rounded
//   once to bf16 (kOneBf16Rounding, bf16_op_case_helpers.h); a wrong layout, row or scale gives
//   1e-2..1.
// - Backward: reads the probabilities it is given. The case hands it bf16 values made on the host
//   (the double reference's, rounded), and the reference is the analytic backward in double on
//   exactly those values: only fp32 reductions separate the two (kReduction).
#include <cmath>
#include <cstring>

#include "tests/runtime/backend_op_cases.h"
#include "tests/runtime/bf16_op_case_helpers.h"
#include "tests/runtime/reference_ops_llama.h"

namespace pipelane::backend_ops {

namespace {
using ref::Vec;
using namespace bf16_cases;

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

}  // namespace

void add_bf16_probability_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::size_t first = cases.size();
  add_mha_cases(cases, rng);
  add_gqa_cases(cases, rng);
  add_attention_input_cases(cases, rng);
  for (std::size_t i = first; i < cases.size(); ++i) cases[i].bf16_buffer = true;
}

}  // namespace pipelane::backend_ops
