// The CNN lanes' training ops (Backend's CNN family: batch norm, ReLU, dropout, the classifier's
// loss, SGD with momentum) as backend op cases: batch norm's phases in blocks with odd boundaries,
// its gradients accumulating onto random values and checked by finite differences of its double
// forward; the others against double references written from the definitions.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tests/runtime/backend_op_cases.h"

namespace pipelane::backend_ops {
namespace {

using ref::to_double;
using ref::Vec;

// NMSE limits from fp32's unit roundoff u = 6e-8 (NMSE is about the squared relative error):
// - copies, selects and the dropout mask: exact, or one rounding (the keep scale) -> 1e-13;
// - at most a few roundings per element (pooling and col2im add <= 9 terms per element, batch
//   norm's normalisation and statistics are double sums rounded once plus 3-4 fp32 operations,
//   SGD's 4 operations, the loss in double): <= 9 u relative, NMSE <= 3e-13 -> 1e-12;
// - batch norm's input gradient against finite differences of the double forward (eps 1e-6:
//   truncation ~1e-12) through the fp32 mean, rstd and factors: 1e-10.
// A wrong index, window or formula gives NMSE of order 1e-3..1.
constexpr double kExact = 1e-13, kFewUlp = 1e-12, kGradient = 1e-10;

std::vector<float> poisoned(std::vector<float> v, bool poison) { return poisoned_first(std::move(v), poison); }

// Batch norm forward in double (biased variance), per channel over `rows` rows.
Vec ref_batch_norm(const Vec& x, const Vec& w, const Vec& b, std::int64_t rows, int C, Vec* mean = nullptr,
                   Vec* rstd = nullptr, Vec* var_unbiased = nullptr) {
  Vec y(x.size());
  for (int c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (std::int64_t r = 0; r < rows; ++r) m += x[r * C + c];
    m /= static_cast<double>(rows);
    for (std::int64_t r = 0; r < rows; ++r) v += (x[r * C + c] - m) * (x[r * C + c] - m);
    const double s = 1.0 / std::sqrt(v / static_cast<double>(rows) + 1e-5);
    for (std::int64_t r = 0; r < rows; ++r) y[r * C + c] = (x[r * C + c] - m) * s * w[c] + b[c];
    if (mean) (*mean)[c] = m;
    if (rstd) (*rstd)[c] = s;
    if (var_unbiased) (*var_unbiased)[c] = v / static_cast<double>(rows - 1);
  }
  return y;
}

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void add_cnn_training_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const auto rnd = [&](std::size_t n, float scale = 1.f) { return ref::random_floats(rng, n, scale); };

  // Batch norm over 23 rows of 5 channels, every phase in blocks [0, 9) [9, 23).
  const std::int64_t M = 23;
  const int C = 5;
  const auto bn_x = rnd(M * C, 2.f), bn_w = rnd(C), bn_b = rnd(C);
  const auto blocks = [](auto&& f) {
    f(0, 9);
    f(9, 23);
  };
  cases.push_back(
      {OpKind::BatchNormForward, "batch_norm_forward (23 rows x 5, three phases in two blocks)", kFewUlp,
       [=](DeviceBuffers& b, bool poison) {
         BatchNormTensors t;
         t.x = b.upload(poisoned(bn_x, poison));
         t.y = b.zeros(M * C);
         t.weight = b.upload(bn_w);
         t.bias = b.upload(bn_b);
         t.sum_a = reinterpret_cast<double*>(b.zeros(2 * C));
         t.mean = b.zeros(C);
         t.rstd = b.zeros(C);
         t.var_unbiased = b.zeros(C);
         t.rows = M;
         t.C = C;
         for (int phase = 0; phase < 3; ++phase)
           blocks([&](std::int64_t r0, std::int64_t r1) { b.backend().batch_norm_forward(phase, t, r0, r1, b.stream()); });
         return Outputs{{"y", b.download(t.y, M * C)},
                        {"mean", b.download(t.mean, C)},
                        {"rstd", b.download(t.rstd, C)},
                        {"var_unbiased", b.download(t.var_unbiased, C)}};
       },
       [=] {
         Vec mean(C), rstd(C), var(C);
         const Vec y = ref_batch_norm(to_double(bn_x), to_double(bn_w), to_double(bn_b), M, C, &mean, &rstd, &var);
         return Expected{{"y", y}, {"mean", mean}, {"rstd", rstd}, {"var_unbiased", var}};
       }});
  {
    const auto dy = rnd(M * C), dx0 = rnd(M * C), dw0 = rnd(C), db0 = rnd(C);
    Vec mean_d(C), rstd_d(C);
    ref_batch_norm(to_double(bn_x), to_double(bn_w), to_double(bn_b), M, C, &mean_d, &rstd_d);
    const std::vector<float> mean(mean_d.begin(), mean_d.end()), rstd(rstd_d.begin(), rstd_d.end());
    cases.push_back(
        {OpKind::BatchNormBackward, "batch_norm_backward (+=, two phases in two blocks)", kGradient,
         [=](DeviceBuffers& b, bool poison) {
           BatchNormTensors t;
           t.x = b.upload(poisoned(bn_x, poison));
           t.dy = b.upload(dy);
           t.dx = b.upload(dx0);
           t.weight = b.upload(bn_w);
           t.dweight = b.upload(dw0);
           t.dbias = b.upload(db0);
           t.sum_a = reinterpret_cast<double*>(b.zeros(2 * C));
           t.sum_b = reinterpret_cast<double*>(b.zeros(2 * C));
           t.mean = b.upload(mean);
           t.rstd = b.upload(rstd);
           t.rows = M;
           t.C = C;
           for (int phase = 0; phase < 2; ++phase)
             blocks([&](std::int64_t r0, std::int64_t r1) { b.backend().batch_norm_backward(phase, t, r0, r1, b.stream()); });
           return Outputs{{"dx", b.download(t.dx, M * C)},
                          {"dweight", b.download(t.dweight, C)},
                          {"dbias", b.download(t.dbias, C)}};
         },
         [=] {
           const Vec x = to_double(bn_x), w = to_double(bn_w), bias = to_double(bn_b);
           const Vec gx = ref::fd_gradient([&](const Vec& v) { return ref_batch_norm(v, w, bias, M, C); }, x, to_double(dy));
           const Vec gw = ref::fd_gradient([&](const Vec& v) { return ref_batch_norm(x, v, bias, M, C); }, w, to_double(dy));
           const Vec gb = ref::fd_gradient([&](const Vec& v) { return ref_batch_norm(x, w, v, M, C); }, bias, to_double(dy));
           Vec dx(M * C), dw(C), db(C);
           for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = dx0[i] + gx[i];
           for (int c = 0; c < C; ++c) {
             dw[c] = dw0[c] + gw[c];
             db[c] = db0[c] + gb[c];
           }
           return Expected{{"dx", dx}, {"dweight", dw}, {"dbias", db}};
         }});
  }
  {
    const auto rm = rnd(C), rv = rnd(C, 0.5f), mean = rnd(C), var = rnd(C, 0.5f);
    cases.push_back({OpKind::BatchNormStatistics, "batch_norm_update_statistics (momentum 0.1)", kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* m = b.upload(poisoned(rm, poison));
                       float* v = b.upload(rv);
                       b.backend().batch_norm_update_statistics(m, v, b.upload(mean), b.upload(var), C, 0.1f, b.stream());
                       return Outputs{{"running_mean", b.download(m, C)}, {"running_var", b.download(v, C)}};
                     },
                     [=] {
                       Vec m(C), v(C);
                       const double mu = 0.1f;  // the fp32 momentum the op is given
                       for (int c = 0; c < C; ++c) {
                         m[c] = (1 - mu) * rm[c] + mu * mean[c];
                         v[c] = (1 - mu) * rv[c] + mu * var[c];
                       }
                       return Expected{{"running_mean", m}, {"running_var", v}};
                     }});
  }

  // Elementwise: ReLU both ways, dropout.
  {
    const std::size_t n = 301;
    const auto x = rnd(n), g = rnd(n);
    cases.push_back({OpKind::ReluForward, "relu_forward (in place, 301)", kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* p = b.upload(poisoned(x, poison));
                       b.backend().relu_forward(p, n, b.stream());
                       return Outputs{{"x", b.download(p, n)}};
                     },
                     [=] {
                       Vec y(n);
                       for (std::size_t i = 0; i < n; ++i) y[i] = std::max(0.0, double(x[i]));
                       return Expected{{"x", y}};
                     }});
    cases.push_back({OpKind::ReluBackward, "relu_backward (in place, 301)", kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* d = b.upload(poisoned(g, poison));
                       b.backend().relu_backward(d, b.upload(x), n, b.stream());
                       return Outputs{{"dx", b.download(d, n)}};
                     },
                     [=] {
                       Vec d(n);
                       for (std::size_t i = 0; i < n; ++i) d[i] = x[i] > 0 ? g[i] : 0.0;
                       return Expected{{"dx", d}};
                     }});
    const std::uint64_t key = 0x0123456789ABCDEFull, first = 17;
    const float p = 0.3f;
    cases.push_back({OpKind::Dropout, "dropout (p 0.3, from index 17)", kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* d = b.upload(poisoned(x, poison));
                       b.backend().dropout(d, n, key, first, p, b.stream());
                       return Outputs{{"x", b.download(d, n)}};
                     },
                     [=] {
                       Vec y(n);
                       int dropped = 0;
                       for (std::size_t i = 0; i < n; ++i) {
                         const double u = static_cast<double>(splitmix64(key + first + i) >> 40) * 0x1p-24;
                         dropped += u < p;
                         y[i] = u < p ? 0.0 : x[i] / (1.0 - p);
                       }
                       if (dropped < 60 || dropped > 120) throw std::logic_error("dropout reference: not ~30% dropped");
                       return Expected{{"x", y}};
                     }});
  }

  // The classifier's loss: 3 rows of 7 classes.
  {
    const int n = 3, classes = 7;
    const auto logits = rnd(n * classes, 3.f);
    const std::vector<std::int32_t> labels{4, 0, 6};
    cases.push_back({OpKind::ClassifierCrossEntropy, "classifier_cross_entropy (3 x 7)", kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* d = b.zeros(n * classes);
                       const double loss = b.backend().classifier_cross_entropy(
                           d, b.upload(poisoned(logits, poison)), b.upload(labels), n, classes, b.stream());
                       return Outputs{{"loss", {static_cast<float>(loss)}}, {"dlogits", b.download(d, n * classes)}};
                     },
                     [=] {
                       double loss = 0;
                       Vec d(n * classes);
                       for (int i = 0; i < n; ++i) {
                         double z = 0;
                         for (int k = 0; k < classes; ++k) z += std::exp(double(logits[i * classes + k]));
                         loss += std::log(z) - logits[i * classes + labels[i]];
                         for (int k = 0; k < classes; ++k)
                           d[i * classes + k] = (std::exp(double(logits[i * classes + k])) / z - (k == labels[i])) / n;
                       }
                       return Expected{{"loss", {loss / n}}, {"dlogits", d}};
                     }});
  }

  // SGD with momentum and weight decay.
  {
    const std::size_t n = 101;
    const auto param = rnd(n), grad = rnd(n, 0.1f), buf = rnd(n, 0.1f);
    const SgdMomentumParams h{0.05f, 0.9f, 1e-4f};
    cases.push_back({OpKind::SgdMomentum, "sgd_momentum_update (lr 0.05, momentum 0.9, decay 1e-4)", kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* p = b.upload(poisoned(param, poison));
                       float* g = b.upload(grad);
                       float* m = b.upload(buf);
                       b.backend().sgd_momentum_update(p, g, m, n, h, b.stream());
                       return Outputs{{"param", b.download(p, n)}, {"momentum", b.download(m, n)}, {"grad", b.download(g, n)}};
                     },
                     [=] {
                       Vec p(n), m(n), g(n, 0.0);
                       for (std::size_t i = 0; i < n; ++i) {
                         m[i] = double(h.momentum) * buf[i] + (grad[i] + double(h.weight_decay) * param[i]);
                         p[i] = param[i] - double(h.lr) * m[i];
                       }
                       return Expected{{"param", p}, {"momentum", m}, {"grad", g}};
                     }});
  }
}

}  // namespace pipelane::backend_ops
