// The Llama family's ops in the op table (backend_op_cases.h): RMSNorm, RoPE, SwiGLU, grouped-
// query attention (training and KV cache) and the lookup's backward without positions, at odd
// sizes: head sizes 6, 10 and 34 (not multiples of 32), T = 1, kv_heads = 1 (MQA), 2 (GQA) and
// = heads, a row stride wider than the heads for RoPE.
#include <cmath>

#include "tests/runtime/backend_op_cases.h"
#include "tests/runtime/reference_ops_llama.h"

namespace pipelane::backend_ops {

namespace {

using ref::to_double;
using ref::Vec;

// The limits of backend_op_cases.cpp, for the same reasons: one rounding per element (a RoPE
// rotation is two products and a sum, SwiGLU's sigmoid uses a 2e-7 exp) -> kFewUlp; reductions
// over a row or head (RMSNorm, attention, their gradients) and finite differences -> kReduction.
constexpr double kFewUlp = 1e-12, kReduction = 1e-10;

Vec fd(const std::function<Vec(const Vec&)>& f, const std::vector<float>& x, const std::vector<float>& R) {
  return ref::fd_gradient(f, to_double(x), to_double(R));
}
Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec out(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

struct Shape {
  int B, T, NH, KVH, hs;
};

void add_rmsnorm_cases(std::vector<OpCase>& cases, std::mt19937& rng, const Shape& s, const std::string& tag) {
  const int N = s.B * s.T, C = s.NH * s.hs;
  const float eps = 1e-5f;
  const auto x = ref::random_floats(rng, static_cast<std::size_t>(N) * C), dout = ref::random_floats(rng, N * C);
  const auto w = ref::random_floats(rng, C, 0.5f), acc0 = ref::random_floats(rng, N * C, 0.1f);
  cases.push_back({OpKind::RmsNormForward, "rmsnorm_forward" + tag, kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* out = b.zeros(N * C);
                     float* rstd = b.zeros(N);
                     b.backend().rmsnorm_forward(out, rstd, b.upload(poisoned_first(x, poison)), b.upload(w), N, C, eps,
                                                 b.stream());
                     return Outputs{{"out", b.download(out, N * C)}, {"rstd", b.download(rstd, N)}};
                   },
                   [=] {
                     Vec rstd;
                     Vec out = ref::rmsnorm(to_double(x), to_double(w), N, C, eps, &rstd);
                     return Expected{{"out", out}, {"rstd", rstd}};
                   }});
  const auto grads = [=] {
    const auto f_x = [&](const Vec& p) { return ref::rmsnorm(p, to_double(w), N, C, eps); };
    const auto f_w = [&](const Vec& p) { return ref::rmsnorm(to_double(x), p, N, C, eps); };
    return Expected{{"dinp", plus(acc0, fd(f_x, x, dout))}, {"dweight", plus(w, fd(f_w, w, dout))}};
  };
  const auto run = [=](int halves) {
    return [=](DeviceBuffers& b, bool poison) {
      float* inp = b.upload(x);
      float* weight = b.upload(w);
      float* rstd = b.zeros(N);
      b.backend().rmsnorm_forward(b.zeros(N * C), rstd, inp, weight, N, C, eps, b.stream());
      float* dinp = b.upload(acc0);  // accumulates (a residual stream's gradient)
      float* dw = b.upload(w);       // accumulates
      float* d = b.upload(poisoned_first(dout, poison));
      if (halves == 1) {
        b.backend().rmsnorm_backward(dinp, dw, d, inp, weight, rstd, N, C, b.stream());
      } else {
        b.backend().rmsnorm_backward_input(dinp, d, inp, weight, rstd, N, C, b.stream());
        b.backend().rmsnorm_backward_params(dw, d, inp, rstd, N, C, b.stream());
      }
      return Outputs{{"dinp", b.download(dinp, N * C)}, {"dweight", b.download(dw, C)}};
    };
  };
  cases.push_back({OpKind::RmsNormBackward, "rmsnorm_backward" + tag, kReduction, run(1), grads});
  cases.push_back({OpKind::RmsNormBackwardInput, "rmsnorm_backward_input + _params" + tag, kReduction, run(2), grads});
  cases.push_back({OpKind::RmsNormBackwardParams, "rmsnorm_backward_params (after _input)" + tag, kReduction, run(2),
                   grads});
}

// RoPE on rows wider than the heads (ld = heads * hs + 3: the extra columns must not move) at a
// position offset, with a table of cos/sin of random angles.
void add_rope_cases(std::vector<OpCase>& cases, std::mt19937& rng, const Shape& s, const std::string& tag) {
  const int N = s.B * s.T, heads = s.KVH, hs = s.hs, ld = heads * hs + 3, pos0 = 2, positions = pos0 + s.T;
  std::vector<float> table(static_cast<std::size_t>(positions) * hs);
  std::uniform_real_distribution<double> angle(-7.0, 7.0);
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < hs / 2; ++i) {
      const double a = angle(rng);
      table[p * hs + i] = static_cast<float>(std::cos(a));
      table[p * hs + hs / 2 + i] = static_cast<float>(std::sin(a));
    }
  const auto x = ref::random_floats(rng, static_cast<std::size_t>(N) * ld), dy = ref::random_floats(rng, N * ld);
  const auto forward = [=](const Vec& p) { return ref::rope(p, to_double(table), s.B, s.T, pos0, heads, hs, ld); };
  cases.push_back({OpKind::RopeForward, "rope_forward (ld > heads * hs, pos0 2)" + tag, kFewUlp,
                   [=](DeviceBuffers& b, bool poison) {
                     float* p = b.upload(poisoned_first(x, poison));
                     b.backend().rope_forward(p, b.upload(table), s.B, s.T, pos0, heads, hs, ld, b.stream());
                     return Outputs{{"x", b.download(p, x.size())}};
                   },
                   [=] { return Expected{{"x", forward(to_double(x))}}; }});
  cases.push_back({OpKind::RopeBackward, "rope_backward (the forward's transpose)" + tag, kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* p = b.upload(poisoned_first(dy, poison));
                     b.backend().rope_backward(p, b.upload(table), s.B, s.T, pos0, heads, hs, ld, b.stream());
                     return Outputs{{"dx", b.download(p, dy.size())}};
                   },
                   [=] { return Expected{{"dx", fd(forward, x, dy)}}; }});
}

void add_swiglu_cases(std::vector<OpCase>& cases, std::mt19937& rng, const Shape& s, const std::string& tag) {
  const std::size_t n = static_cast<std::size_t>(s.B) * s.T * (3 * s.hs + 1);
  const auto gate = ref::random_floats(rng, n, 3.f), up = ref::random_floats(rng, n), dout = ref::random_floats(rng, n);
  cases.push_back({OpKind::SwigluForward, "swiglu_forward" + tag, kFewUlp,
                   [=](DeviceBuffers& b, bool poison) {
                     float* out = b.zeros(n);
                     b.backend().swiglu_forward(out, b.upload(poisoned_first(gate, poison)), b.upload(up), n, b.stream());
                     return Outputs{{"out", b.download(out, n)}};
                   },
                   [=] { return Expected{{"out", ref::swiglu(to_double(gate), to_double(up))}}; }});
  cases.push_back({OpKind::SwigluBackward, "swiglu_backward (overwrites)" + tag, kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* dgate = b.upload(std::vector<float>(n, 5.f));
                     float* dup = b.upload(std::vector<float>(n, 5.f));
                     b.backend().swiglu_backward(dgate, dup, b.upload(poisoned_first(dout, poison)), b.upload(gate),
                                                 b.upload(up), n, b.stream());
                     return Outputs{{"dgate", b.download(dgate, n)}, {"dup", b.download(dup, n)}};
                   },
                   [=] {
                     const auto f_g = [&](const Vec& p) { return ref::swiglu(p, to_double(up)); };
                     const auto f_u = [&](const Vec& p) { return ref::swiglu(to_double(gate), p); };
                     return Expected{{"dgate", fd(f_g, gate, dout)}, {"dup", fd(f_u, up, dout)}};
                   }});
}

void add_attention_cases(std::vector<OpCase>& cases, std::mt19937& rng, const Shape& s, const std::string& tag) {
  const int B = s.B, T = s.T, NH = s.NH, KVH = s.KVH, hs = s.hs, N = B * T;
  const std::size_t nq = static_cast<std::size_t>(N) * NH * hs, nkv = static_cast<std::size_t>(N) * KVH * hs;
  const auto q = ref::random_floats(rng, nq), k = ref::random_floats(rng, nkv), v = ref::random_floats(rng, nkv);
  const auto dout = ref::random_floats(rng, nq);
  const auto f = [=](const Vec& qq, const Vec& kk, const Vec& vv) { return ref::attention_gqa(qq, kk, vv, B, T, NH, KVH, hs); };
  const auto forward = [=](DeviceBuffers& b, bool poison, float** out_q, float** out_k, float** out_v, float** att) {
    *out_q = b.upload(poisoned_first(q, poison));
    *out_k = b.upload(k);
    *out_v = b.upload(v);
    *att = b.zeros(b.backend().attention_gqa_saved_floats(B, T, NH, hs));
    float* out = b.zeros(nq);
    b.backend().attention_forward_gqa(out, *att, *out_q, *out_k, *out_v, B, T, NH, KVH, hs, b.stream());
    return out;
  };
  cases.push_back({OpKind::AttentionForwardGqa, "attention_forward_gqa" + tag, kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float *pq, *pk, *pv, *att;
                     float* out = forward(b, poison, &pq, &pk, &pv, &att);
                     return Outputs{{"out", b.download(out, nq)}};
                   },
                   [=] { return Expected{{"out", f(to_double(q), to_double(k), to_double(v))}}; }});
  cases.push_back({OpKind::AttentionBackwardGqa, "attention_backward_gqa (overwrites)" + tag, kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float *pq, *pk, *pv, *att;
                     float* out = forward(b, false, &pq, &pk, &pv, &att);
                     float* dq = b.upload(std::vector<float>(nq, 5.f));
                     float* dk = b.upload(std::vector<float>(nkv, 5.f));
                     float* dv = b.upload(std::vector<float>(nkv, 5.f));
                     b.backend().attention_backward_gqa(dq, dk, dv, b.upload(poisoned_first(dout, poison)), pq, pk, pv,
                                                        out, att, B, T, NH, KVH, hs, b.stream());
                     return Outputs{{"dq", b.download(dq, nq)}, {"dk", b.download(dk, nkv)}, {"dv", b.download(dv, nkv)}};
                   },
                   [=] {
                     const Vec Q = to_double(q), K = to_double(k), V = to_double(v);
                     return Expected{{"dq", fd([&](const Vec& p) { return f(p, K, V); }, q, dout)},
                                     {"dk", fd([&](const Vec& p) { return f(Q, p, V); }, k, dout)},
                                     {"dv", fd([&](const Vec& p) { return f(Q, K, p); }, v, dout)}};
                   }});
  // KV cache: one sequence, the first `past` positions in one call and the rest in a second; every
  // row must equal full causal attention over the sequence.
  const int S = T + 3, past = T > 1 ? 2 : 1, rest = S - past;
  const std::size_t sq = static_cast<std::size_t>(S) * NH * hs, skv = static_cast<std::size_t>(S) * KVH * hs;
  const auto seq_q = ref::random_floats(rng, sq), seq_k = ref::random_floats(rng, skv), seq_v = ref::random_floats(rng, skv);
  cases.push_back({OpKind::AttentionForwardKvGqa, "attention_forward_kv_gqa (two calls)" + tag, kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     const float* pq = b.upload(poisoned_first(seq_q, poison));
                     const float* pk = b.upload(seq_k);
                     const float* pv = b.upload(seq_v);
                     float* kc = b.zeros(skv);
                     float* vc = b.zeros(skv);
                     float* scores = b.zeros(static_cast<std::size_t>(S) * NH * S);
                     float* out = b.zeros(sq);
                     const std::size_t qw = static_cast<std::size_t>(NH) * hs, kvw = static_cast<std::size_t>(KVH) * hs;
                     b.backend().attention_forward_kv_gqa(out, scores, pq, pk, pv, kc, vc, 0, past, NH, KVH, hs, b.stream());
                     b.backend().attention_forward_kv_gqa(out + past * qw, scores, pq + past * qw, pk + past * kvw,
                                                          pv + past * kvw, kc, vc, past, rest, NH, KVH, hs, b.stream());
                     return Outputs{{"out", b.download(out, sq)}};
                   },
                   [=] {
                     return Expected{{"out", ref::attention_gqa(to_double(seq_q), to_double(seq_k), to_double(seq_v), 1, S,
                                                                NH, KVH, hs)}};
                   }});
}

void add_embedding_tokens_case(std::vector<OpCase>& cases, std::mt19937& rng, const Shape& s, const std::string& tag) {
  const int N = s.B * s.T, C = s.NH * s.hs, v0 = 3, vcount = 7, V = 13;
  std::uniform_int_distribution<int> pick(0, V - 1);
  std::vector<std::int32_t> tokens(N);
  for (auto& t : tokens) t = pick(rng);
  const auto dout = ref::random_floats(rng, static_cast<std::size_t>(N) * C);
  const std::vector<float> dwte0(static_cast<std::size_t>(vcount) * C, 0.25f);
  cases.push_back({OpKind::EmbeddingBackwardTokens, "embedding_backward_tokens (rows [3, 10), accumulates)" + tag,
                   kReduction,
                   [=](DeviceBuffers& b, bool poison) {
                     float* dwte = b.upload(dwte0);
                     b.backend().embedding_backward_tokens(dwte, b.upload(poisoned_first(dout, poison)), b.upload(tokens),
                                                           N, C, v0, vcount, b.stream());
                     return Outputs{{"dwte", b.download(dwte, dwte0.size())}};
                   },
                   [=] {
                     Vec dwte = to_double(dwte0);
                     for (int n = 0; n < N; ++n)
                       if (tokens[n] >= v0 && tokens[n] < v0 + vcount)
                         for (int c = 0; c < C; ++c) dwte[(tokens[n] - v0) * C + c] += dout[n * C + c];
                     return Expected{{"dwte", dwte}};
                   }});
}

}  // namespace

void add_llama_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const Shape s : {Shape{2, 5, 4, 2, 6}, Shape{1, 1, 3, 1, 10}, Shape{1, 4, 2, 2, 34}}) {
    const std::string tag = " (B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " heads=" +
                            std::to_string(s.NH) + " kv_heads=" + std::to_string(s.KVH) + " hs=" + std::to_string(s.hs) + ")";
    add_rmsnorm_cases(cases, rng, s, tag);
    add_rope_cases(cases, rng, s, tag);
    add_swiglu_cases(cases, rng, s, tag);
    add_attention_cases(cases, rng, s, tag);
    add_embedding_tokens_case(cases, rng, s, tag);
  }
}

}  // namespace pipelane::backend_ops
