#include "tests/runtime/backend_op_cases.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

namespace pipelane::backend_ops {

// NMSE limits, from fp32's unit roundoff u = 6e-8 (NMSE is about the squared relative error):
// - one correctly rounded operation per element (copies, adds, scale, bias): errors <= u, NMSE
//   <= u^2 ~ 4e-15 -> kExact = 1e-13 (a wrong element among ~100 gives >= 1e-4);
// - GeLU's tanh and AdamW's sqrt/divide: a few u -> kFewUlp = 1e-12;
// - reductions of K <= 64 products (matmul, layernorm, attention, logits, cross-entropy): about
//   sqrt(K)..K u relative, i.e. up to 4e-6, NMSE <= 1.6e-11 -> kReduction = 1e-10;
// - gradients checked against central finite differences of the double reference (eps 1e-6:
//   truncation ~1e-12, far below fp32's own error) carry the backward's reductions -> 1e-10.
// A formula bug (a wrong scale, layout or missing term) gives NMSE of order 1e-4..1.
constexpr double kExact = 1e-13, kFewUlp = 1e-12, kReduction = 1e-10;

DeviceBuffers::DeviceBuffers(Backend& backend, Stream& stream, std::size_t bytes)
    : backend_(backend), stream_(stream), arena_(backend.create_arena("backend op test", bytes)) {}

float* DeviceBuffers::upload(const std::vector<float>& host) {
  std::vector<float> padded(host);
  padded.resize(host.size() + kGuard, kSentinel);
  float* p = arena_->allocate_n<float>(padded.size(), "test buffer");
  backend_.copy(p, padded.data(), padded.size() * sizeof(float), stream_);
  stream_.synchronize();
  guarded_.push_back({p, host.size()});
  return p;
}

std::int32_t* DeviceBuffers::upload(const std::vector<std::int32_t>& host) {
  auto* p = arena_->allocate_n<std::int32_t>(host.size() + 1, "test tokens");
  backend_.copy(p, host.data(), host.size() * sizeof(std::int32_t), stream_);
  stream_.synchronize();
  return p;
}

std::vector<float> DeviceBuffers::download(const float* device, std::size_t n) {
  std::vector<float> out(n);
  backend_.copy(out.data(), device, n * sizeof(float), stream_);
  stream_.synchronize();
  return out;
}

std::vector<std::string> DeviceBuffers::damaged_guards() {
  std::vector<std::string> damaged;
  for (std::size_t i = 0; i < guarded_.size(); ++i) {
    const std::vector<float> guard = download(guarded_[i].data + guarded_[i].n, kGuard);
    for (float g : guard)
      if (std::memcmp(&g, &kSentinel, sizeof g) != 0) {
        damaged.push_back("buffer " + std::to_string(i) + " of " + std::to_string(guarded_[i].n) + " floats");
        break;
      }
  }
  return damaged;
}

double nmse(const std::vector<float>& got, const ref::Vec& want) {
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? err / norm : err;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  return nmse(got, ref::Vec(want.begin(), want.end()));
}

std::vector<float> poisoned_first(std::vector<float> v, bool poison) {
  if (poison && !v.empty()) v[0] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

namespace {

using ref::Vec;
using ref::to_double;

std::vector<std::int32_t> random_tokens(std::mt19937& rng, std::size_t n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

std::vector<float> poisoned(std::vector<float> v, bool poison) { return poisoned_first(std::move(v), poison); }

// Gradient of sum(R * f(x)) with respect to x, by central differences of the reference.
Vec fd(const std::function<Vec(const Vec&)>& f, const std::vector<float>& x, const std::vector<float>& R) {
  return ref::fd_gradient(f, to_double(x), to_double(R));
}

Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec out(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

}  // namespace

std::vector<OpCase> all_cases(std::uint32_t seed) {
  std::vector<OpCase> cases;
  std::mt19937 rng(seed);
  const auto rnd = [&](std::size_t n, float scale = 1.f) { return ref::random_floats(rng, n, scale); };

  // Odd sizes: C not a multiple of 32 (or 16), T = 1 somewhere, vocab not a multiple of a block.
  struct Dims {
    int B, T, C, NH;
  };
  for (const Dims d : {Dims{2, 5, 36, 3}, Dims{1, 1, 20, 2}}) {
    const int B = d.B, T = d.T, C = d.C, NH = d.NH, N = B * T, V = 13, OC = 3 * C + 1;
    const std::string tag = " (B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + ")";
    const auto tokens = random_tokens(rng, N, V);
    const auto wte = rnd(static_cast<std::size_t>(V) * C), wpe = rnd(static_cast<std::size_t>(T) * C);
    const auto x = rnd(static_cast<std::size_t>(N) * C), dout = rnd(static_cast<std::size_t>(N) * C);
    const auto w = rnd(C, 0.5f), bvec = rnd(C, 0.5f), acc0 = rnd(static_cast<std::size_t>(N) * C, 0.1f);

    cases.push_back({OpKind::EmbeddingForward, "embedding_forward" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(N * C);
                       b.backend().embedding_forward(out, b.upload(tokens), b.upload(poisoned(wte, poison)),
                                                     b.upload(wpe), B, T, C, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}};
                     },
                     [=] { return Expected{{"out", ref::embedding(tokens, to_double(wte), to_double(wpe), B, T, C)}}; }});

    cases.push_back({OpKind::EmbeddingBackward, "embedding_backward (accumulates)" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* dwte = b.upload(std::vector<float>(wte.size(), 0.25f));
                       float* dwpe = b.upload(std::vector<float>(wpe.size(), 0.25f));
                       b.backend().embedding_backward(dwte, dwpe, b.upload(poisoned(dout, poison)), b.upload(tokens),
                                                      B, T, C, b.stream());
                       return Outputs{{"dwte", b.download(dwte, wte.size())}, {"dwpe", b.download(dwpe, wpe.size())}};
                     },
                     [=] {
                       const auto f_wte = [&](const Vec& p) { return ref::embedding(tokens, p, to_double(wpe), B, T, C); };
                       const auto f_wpe = [&](const Vec& p) { return ref::embedding(tokens, to_double(wte), p, B, T, C); };
                       Vec dwte = fd(f_wte, wte, dout), dwpe = fd(f_wpe, wpe, dout);
                       for (double& v : dwte) v += 0.25;
                       for (double& v : dwpe) v += 0.25;
                       return Expected{{"dwte", dwte}, {"dwpe", dwpe}};
                     }});

    // The vocab-parallel pieces: this "rank" holds rows [4, 4 + 6) of the table.
    const int v0 = 4, vcount = 6;
    const std::vector<float> wte_local(wte.begin() + static_cast<std::ptrdiff_t>(v0) * C,
                                       wte.begin() + static_cast<std::ptrdiff_t>(v0 + vcount) * C);
    cases.push_back({OpKind::EmbeddingLookupLocal, "embedding_lookup_local" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.upload(std::vector<float>(N * C, 9.f));  // overwritten everywhere
                       b.backend().embedding_lookup_local(out, b.upload(tokens), b.upload(poisoned(wte_local, poison)),
                                                          N, C, v0, vcount, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}};
                     },
                     [=] {
                       Vec out(static_cast<std::size_t>(N) * C, 0.0);
                       for (int n = 0; n < N; ++n)
                         if (tokens[n] >= v0 && tokens[n] < v0 + vcount)
                           for (int c = 0; c < C; ++c) out[n * C + c] = wte[tokens[n] * C + c];
                       return Expected{{"out", out}};
                     }});
    cases.push_back({OpKind::AddPositions, "add_positions" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.upload(poisoned(x, poison));
                       b.backend().add_positions(out, b.upload(wpe), B, T, C, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}};
                     },
                     [=] {
                       Vec out = to_double(x);
                       for (int n = 0; n < N; ++n)
                         for (int c = 0; c < C; ++c) out[n * C + c] += wpe[(n % T) * C + c];
                       return Expected{{"out", out}};
                     }});
    cases.push_back({OpKind::EmbeddingBackwardLocal, "embedding_backward_local" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* dwte = b.zeros(wte_local.size());
                       float* dwpe = b.zeros(wpe.size());
                       b.backend().embedding_backward_local(dwte, dwpe, b.upload(poisoned(dout, poison)),
                                                            b.upload(tokens), B, T, C, v0, vcount, b.stream());
                       return Outputs{{"dwte", b.download(dwte, wte_local.size())}, {"dwpe", b.download(dwpe, wpe.size())}};
                     },
                     [=] {
                       Vec dwte(wte_local.size(), 0.0), dwpe(wpe.size(), 0.0);
                       for (int n = 0; n < N; ++n)
                         for (int c = 0; c < C; ++c) {
                           dwpe[(n % T) * C + c] += dout[n * C + c];
                           if (tokens[n] >= v0 && tokens[n] < v0 + vcount) dwte[(tokens[n] - v0) * C + c] += dout[n * C + c];
                         }
                       return Expected{{"dwte", dwte}, {"dwpe", dwpe}};
                     }});

    // Layernorm and its backward (whole and split in two halves).
    cases.push_back({OpKind::LayerNormForward, "layernorm_forward" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(N * C);
                       float* mean = b.zeros(N);
                       float* rstd = b.zeros(N);
                       b.backend().layernorm_forward(out, mean, rstd, b.upload(poisoned(x, poison)), b.upload(w),
                                                     b.upload(bvec), N, C, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}, {"mean", b.download(mean, N)},
                                      {"rstd", b.download(rstd, N)}};
                     },
                     [=] {
                       Vec mean, rstd;
                       Vec out = ref::layernorm(to_double(x), to_double(w), to_double(bvec), N, C, &mean, &rstd);
                       return Expected{{"out", out}, {"mean", mean}, {"rstd", rstd}};
                     }});
    const auto layernorm_grads = [=] {
      const auto f_x = [&](const Vec& p) { return ref::layernorm(p, to_double(w), to_double(bvec), N, C); };
      const auto f_w = [&](const Vec& p) { return ref::layernorm(to_double(x), p, to_double(bvec), N, C); };
      const auto f_b = [&](const Vec& p) { return ref::layernorm(to_double(x), to_double(w), p, N, C); };
      return Expected{{"dinp", plus(acc0, fd(f_x, x, dout))}, {"dweight", plus(w, fd(f_w, w, dout))},
                      {"dbias", plus(bvec, fd(f_b, bvec, dout))}};
    };
    // Forward first (mean/rstd come from the backend under test), then the backward op(s).
    const auto layernorm_backward_run = [=](int halves) {
      return [=](DeviceBuffers& b, bool poison) {
        float* inp = b.upload(x);
        float* weight = b.upload(w);
        float* mean = b.zeros(N);
        float* rstd = b.zeros(N);
        b.backend().layernorm_forward(b.zeros(N * C), mean, rstd, inp, weight, b.upload(bvec), N, C, b.stream());
        float* dinp = b.upload(acc0);  // accumulates: the residual stream's gradient is a sum
        float* dw = b.upload(w);       // parameter gradients accumulate; start from w itself
        float* db = b.upload(bvec);
        float* d = b.upload(poisoned(dout, poison));
        if (halves == 1) {
          b.backend().layernorm_backward(dinp, dw, db, d, inp, weight, mean, rstd, N, C, b.stream());
        } else {
          b.backend().layernorm_backward_input(dinp, d, inp, weight, mean, rstd, N, C, b.stream());
          b.backend().layernorm_backward_params(dw, db, d, inp, mean, rstd, N, C, b.stream());
        }
        return Outputs{{"dinp", b.download(dinp, N * C)}, {"dweight", b.download(dw, C)}, {"dbias", b.download(db, C)}};
      };
    };
    cases.push_back({OpKind::LayerNormBackward, "layernorm_backward" + tag, kReduction, layernorm_backward_run(1),
                     layernorm_grads});
    cases.push_back({OpKind::LayerNormBackwardInput, "layernorm_backward_input + _params" + tag, kReduction,
                     layernorm_backward_run(2), layernorm_grads});
    cases.push_back({OpKind::LayerNormBackwardParams, "layernorm_backward_params (after _input)" + tag, kReduction,
                     layernorm_backward_run(2), layernorm_grads});

    // Matmul (nn.Linear) forward and backward; OC odd.
    const auto W = rnd(static_cast<std::size_t>(OC) * C, 0.3f), bias = rnd(OC, 0.3f);
    const auto dy = rnd(static_cast<std::size_t>(N) * OC);
    cases.push_back({OpKind::MatmulForward, "matmul_forward (bias)" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(N * OC);
                       b.backend().matmul_forward(out, b.upload(poisoned(x, poison)), b.upload(W), b.upload(bias), N, C, OC,
                                                  b.stream());
                       return Outputs{{"out", b.download(out, N * OC)}};
                     },
                     [=] { return Expected{{"out", ref::matmul(to_double(x), to_double(W), to_double(bias), N, C, OC)}}; }});
    const auto matmul_grads = [=] {
      const auto f_x = [&](const Vec& p) { return ref::matmul(p, to_double(W), to_double(bias), N, C, OC); };
      const auto f_w = [&](const Vec& p) { return ref::matmul(to_double(x), p, to_double(bias), N, C, OC); };
      const auto f_b = [&](const Vec& p) { return ref::matmul(to_double(x), to_double(W), p, N, C, OC); };
      return Expected{{"dinp", fd(f_x, x, dy)}, {"dweight", plus(W, fd(f_w, W, dy))}, {"dbias", plus(bias, fd(f_b, bias, dy))}};
    };
    cases.push_back({OpKind::MatmulBackward, "matmul_backward" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* dinp = b.upload(std::vector<float>(N * C, 5.f));  // overwritten
                       float* dw = b.upload(W);
                       float* db = b.upload(bias);
                       b.backend().matmul_backward(dinp, dw, db, b.upload(poisoned(dy, poison)), b.upload(x), b.upload(W), N, C,
                                                   OC, b.stream());
                       return Outputs{{"dinp", b.download(dinp, N * C)}, {"dweight", b.download(dw, W.size())},
                                      {"dbias", b.download(db, OC)}};
                     },
                     matmul_grads});
    cases.push_back({OpKind::MatmulBackwardInput, "matmul_backward_input" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* dinp = b.upload(std::vector<float>(N * C, 5.f));
                       b.backend().matmul_backward_input(dinp, b.upload(poisoned(dy, poison)), b.upload(W), N, C, OC, b.stream());
                       return Outputs{{"dinp", b.download(dinp, N * C)}};
                     },
                     [=] { return Expected{{"dinp", matmul_grads().at("dinp")}}; }});

    // The MLP's layers with their GeLU (matmul_gelu_forward, matmul_backward_input_dgelu): width
    // 4C (a multiple of 8: the CUDA backend fuses the GeLU into cuBLASLt's epilogue) and 4C + 1
    // (it cannot: the two-op default).
    for (const int M : {4 * C, 4 * C + 1}) {
      const std::string mtag = tag + " width " + std::to_string(M);
      const auto W1 = rnd(static_cast<std::size_t>(M) * C, 0.3f), b1 = rnd(M, 0.3f);
      const auto W2 = rnd(static_cast<std::size_t>(C) * M, 0.3f), pre = rnd(static_cast<std::size_t>(N) * M);
      cases.push_back({OpKind::MatmulGeluForward, "matmul_gelu_forward" + mtag, kReduction,
                       [=](DeviceBuffers& b, bool poison) {
                         float* p = b.zeros(N * M);
                         float* out = b.zeros(N * M);
                         b.backend().matmul_gelu_forward(p, out, b.upload(poisoned(x, poison)), b.upload(W1), b.upload(b1),
                                                         N, C, M, b.stream());
                         return Outputs{{"pre", b.download(p, N * M)}, {"out", b.download(out, N * M)}};
                       },
                       [=] {
                         const Vec p = ref::matmul(to_double(x), to_double(W1), to_double(b1), N, C, M);
                         return Expected{{"pre", p}, {"out", ref::gelu(p)}};
                       }});
      cases.push_back({OpKind::MatmulBackwardInputDgelu, "matmul_backward_input_dgelu" + mtag, kReduction,
                       [=](DeviceBuffers& b, bool poison) {
                         float* dpre = b.upload(std::vector<float>(N * M, 5.f));  // overwritten
                         b.backend().matmul_backward_input_dgelu(dpre, b.upload(poisoned(dout, poison)), b.upload(W2),
                                                                 b.upload(pre), N, M, C, b.stream());
                         return Outputs{{"dpre", b.download(dpre, N * M)}};
                       },
                       [=] {
                         const Vec no_bias(C, 0.0);
                         const auto f = [&](const Vec& p) { return ref::matmul(ref::gelu(p), to_double(W2), no_bias, N, M, C); };
                         return Expected{{"dpre", fd(f, pre, dout)}};
                       }});
    }

    // Attention.
    const auto qkv = rnd(static_cast<std::size_t>(N) * 3 * C);
    const std::size_t att_n = static_cast<std::size_t>(B) * NH * T * T;
    cases.push_back({OpKind::AttentionForward, "attention_forward" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(N * C);
                       float* att = b.zeros(att_n);
                       b.backend().attention_forward(out, att, b.upload(poisoned(qkv, poison)), B, T, C, NH, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}, {"att", b.download(att, att_n)}};
                     },
                     [=] {
                       Vec att;
                       Vec out = ref::attention(to_double(qkv), B, T, C, NH, &att);
                       return Expected{{"out", out}, {"att", att}};
                     }});
    cases.push_back({OpKind::AttentionBackward, "attention_backward" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* q = b.upload(qkv);
                       float* att = b.zeros(att_n);
                       float* out = b.zeros(N * C);
                       b.backend().attention_forward(out, att, q, B, T, C, NH, b.stream());
                       float* dqkv = b.upload(std::vector<float>(N * 3 * C, 5.f));  // overwritten
                       b.backend().attention_backward(dqkv, b.upload(poisoned(dout, poison)), q, out, att, B, T, C, NH,
                                                      b.stream());
                       return Outputs{{"dqkv", b.download(dqkv, N * 3 * C)}};
                     },
                     [=] {
                       const auto f = [&](const Vec& p) { return ref::attention(p, B, T, C, NH); };
                       return Expected{{"dqkv", fd(f, qkv, dout)}};
                     }});

    // Element-wise.
    const auto y = rnd(static_cast<std::size_t>(N) * C);
    cases.push_back({OpKind::GeluForward, "gelu_forward" + tag, kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(N * C);
                       b.backend().gelu_forward(out, b.upload(poisoned(x, poison)), N * C, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}};
                     },
                     [=] { return Expected{{"out", ref::gelu(to_double(x))}}; }});
    cases.push_back({OpKind::GeluBackward, "gelu_backward" + tag, kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* d = b.upload(std::vector<float>(N * C, 5.f));
                       b.backend().gelu_backward(d, b.upload(x), b.upload(poisoned(dout, poison)), N * C, b.stream());
                       return Outputs{{"dinp", b.download(d, N * C)}};
                     },
                     [=] {
                       const auto f = [&](const Vec& p) { return ref::gelu(p); };
                       return Expected{{"dinp", fd(f, x, dout)}};
                     }});
    cases.push_back({OpKind::Add, "add" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(N * C);
                       b.backend().add(out, b.upload(poisoned(x, poison)), b.upload(y), N * C, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}};
                     },
                     [=] { return Expected{{"out", plus(x, to_double(y))}}; }});
    cases.push_back({OpKind::AddInplace, "add_inplace" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* acc = b.upload(poisoned(x, poison));
                       b.backend().add_inplace(acc, b.upload(y), N * C, b.stream());
                       return Outputs{{"out", b.download(acc, N * C)}};
                     },
                     [=] { return Expected{{"out", plus(x, to_double(y))}}; }});
    cases.push_back({OpKind::AddBias, "add_bias" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.upload(poisoned(x, poison));
                       b.backend().add_bias(out, b.upload(bvec), N, C, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}};
                     },
                     [=] {
                       Vec out = to_double(x);
                       for (int n = 0; n < N; ++n)
                         for (int c = 0; c < C; ++c) out[n * C + c] += bvec[c];
                       return Expected{{"out", out}};
                     }});
    cases.push_back({OpKind::Scale, "scale" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.upload(poisoned(x, poison));
                       b.backend().scale(out, 0.375f, N * C, b.stream());
                       return Outputs{{"out", b.download(out, N * C)}};
                     },
                     [=] {
                       Vec out = to_double(x);
                       for (double& v : out) v *= 0.375;
                       return Expected{{"out", out}};
                     }});
    cases.push_back({OpKind::SumSquares, "sum_squares" + tag, kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       const double s = b.backend().sum_squares(b.upload(poisoned(x, poison)), N * C, b.stream());
                       return Outputs{{"sum", {static_cast<float>(s)}}};
                     },
                     [=] {
                       double s = 0;
                       for (float v : x) s += static_cast<double>(v) * v;
                       return Expected{{"sum", {s}}};
                     }});

    // The tied head: logits, fused cross-entropy (forward and backward), the vocab-parallel head
    // as a group of one (its collectives are identities), with Vp > V (padding excluded).
    const int Vp = 16;
    const auto wte_p = [&] {
      std::vector<float> t = wte;
      t.resize(static_cast<std::size_t>(Vp) * C, 0.f);
      return t;
    }();
    const auto targets = random_tokens(rng, N, V);
    const float gscale = 1.0f / static_cast<float>(N);
    cases.push_back({OpKind::LmHeadLogits, "lm_head_logits" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(N * Vp);
                       b.backend().lm_head_logits(out, b.upload(poisoned(x, poison)), b.upload(wte_p), N, C, Vp, b.stream());
                       return Outputs{{"logits", b.download(out, N * Vp)}};
                     },
                     [=] { return Expected{{"logits", ref::lm_head_logits(to_double(x), to_double(wte_p), N, C, Vp)}}; }});
    const auto head_expected = [=] {
      Vec dx, dwte, losses;
      ref::cross_entropy_backward(dx, dwte, to_double(x), to_double(wte_p), targets, N, C, V, Vp, gscale, &losses);
      double sum = 0;
      for (double l : losses) sum += l;
      return Expected{{"losses", losses}, {"sum", {sum}}, {"dx", dx}, {"dwte", plus(wte_p, dwte)}};
    };
    cases.push_back({OpKind::LmHeadCrossEntropy, "lm_head_cross_entropy (forward + backward)" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* losses = b.zeros(N);
                       float* dx = b.upload(std::vector<float>(N * C, 5.f));  // overwritten
                       float* dwte = b.upload(wte_p);                          // accumulates
                       float* scratch = b.zeros(b.backend().lm_head_scratch_floats(N, Vp));
                       const double sum = b.backend().lm_head_cross_entropy(
                           losses, dx, dwte, b.upload(poisoned(x, poison)), b.upload(wte_p), b.upload(targets), N, C, V,
                           Vp, gscale, scratch, b.stream());
                       return Outputs{{"losses", b.download(losses, N)}, {"sum", {static_cast<float>(sum)}},
                                      {"dx", b.download(dx, N * C)}, {"dwte", b.download(dwte, wte_p.size())}};
                     },
                     head_expected});
    cases.push_back({OpKind::LmHeadCrossEntropyVocabParallel, "lm_head_cross_entropy_vocab_parallel (group of one)" + tag,
                     kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       const GroupReduce alone{[](float*, std::size_t) {}, [](float*, std::size_t) {}};
                       float* losses = b.zeros(N);
                       float* dx = b.upload(std::vector<float>(N * C, 5.f));
                       float* dwte = b.upload(wte_p);
                       float* scratch = b.zeros(b.backend().lm_head_vocab_parallel_scratch_floats(N, Vp));
                       const double sum = b.backend().lm_head_cross_entropy_vocab_parallel(
                           losses, dx, dwte, b.upload(poisoned(x, poison)), b.upload(wte_p), b.upload(targets), N, C, V,
                           0, Vp, gscale, scratch, alone, b.stream());
                       return Outputs{{"losses", b.download(losses, N)}, {"sum", {static_cast<float>(sum)}},
                                      {"dx", b.download(dx, N * C)}, {"dwte", b.download(dwte, wte_p.size())}};
                     },
                     head_expected});

    // KV-cache attention: the first `past` positions go in one call, the rest in a second; the
    // last rows must equal full causal attention over the whole sequence.
    const int S = T + 3, past = 2, n_new = S - past;
    const auto seq_qkv = rnd(static_cast<std::size_t>(S) * 3 * C);
    cases.push_back({OpKind::AttentionForwardKv, "attention_forward_kv (two calls)" + tag, kReduction,
                     [=](DeviceBuffers& b, bool poison) {
                       float* q = b.upload(poisoned(seq_qkv, poison));
                       float* k = b.zeros(S * C);
                       float* v = b.zeros(S * C);
                       float* scores = b.zeros(static_cast<std::size_t>(S) * NH * S);
                       float* out = b.zeros(S * C);
                       b.backend().attention_forward_kv(out, scores, q, k, v, 0, past, C, NH, b.stream());
                       b.backend().attention_forward_kv(out + past * C, scores, q + past * 3 * C, k, v, past, n_new,
                                                        C, NH, b.stream());
                       return Outputs{{"out", b.download(out, S * C)}};
                     },
                     [=] { return Expected{{"out", ref::attention(to_double(seq_qkv), 1, S, C, NH)}}; }});

    // AdamW with weight decay and a clipping scale.
    const auto param = rnd(N * C), grad = rnd(N * C), m0 = rnd(N * C, 0.1f);
    std::vector<float> v0_(N * C);
    for (std::size_t i = 0; i < v0_.size(); ++i) v0_[i] = 0.01f * (1 + static_cast<float>(i % 7));
    cases.push_back({OpKind::AdamW, "adamw_update (step 3, decay, clip scale)" + tag, kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* p = b.upload(poisoned(param, poison));
                       float* m = b.upload(m0);
                       float* v = b.upload(v0_);
                       const AdamWParams h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
                       b.backend().adamw_update(p, b.upload(grad), m, v, param.size(), h, 0.5f, b.stream());
                       return Outputs{{"param", b.download(p, param.size())}, {"m", b.download(m, param.size())},
                                      {"v", b.download(v, param.size())}};
                     },
                     [=] {
                       Vec p = to_double(param), m = to_double(m0), v = to_double(v0_);
                       ref::adamw_step(p, to_double(grad), m, v, ref::AdamW{1e-2, 0.9, 0.95, 1e-8, 0.1}, 3, 0.5);
                       return Expected{{"param", p}, {"m", m}, {"v", v}};
                     }});
  }
  add_pagerank_cases(cases, rng);
  add_graph_cases(cases, rng);
  add_llama_cases(cases, rng);
  add_cnn_cases(cases, rng);
  add_bf16_storage_cases(cases, rng);
  add_bf16_probability_cases(cases, rng);
  add_bf16_activation_cases(cases, rng);
  return cases;
}

}  // namespace pipelane::backend_ops
