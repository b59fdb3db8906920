// The CNN lanes' ops (Backend's CNN family) as backend op cases: odd shapes, blocks of rows with
// odd boundaries (the lanes cut every phase into blocks), input gradients accumulating onto random
// values, against double references written from the definitions (batch norm's gradients by finite
// differences of its double forward).
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

// Bytes of any type through the harness's float buffers (device memory on a device backend).
template <typename T>
T* upload_as(DeviceBuffers& b, const std::vector<T>& host) {
  std::vector<float> f((host.size() * sizeof(T) + 3) / 4);
  std::memcpy(f.data(), host.data(), host.size() * sizeof(T));
  return reinterpret_cast<T*>(b.upload(f));
}
template <typename T>
std::vector<T> download_as(DeviceBuffers& b, const T* device, std::size_t n) {
  const std::vector<float> f = b.download(reinterpret_cast<const float*>(device), (n * sizeof(T) + 3) / 4);
  std::vector<T> out(n);
  std::memcpy(out.data(), f.data(), n * sizeof(T));
  return out;
}
template <typename T>
std::vector<float> as_floats(const std::vector<T>& v) {
  return std::vector<float>(v.begin(), v.end());
}

std::size_t idx(const CnnWindow& g, std::int64_t n, int h, int w, int c) {
  return static_cast<std::size_t>(((n * g.h + h) * g.w + w) * g.c + c);
}

// im2col in double, straight from the definition: output row r, patch element (kh, kw, ic).
Vec ref_im2col(const std::vector<float>& in, const CnnWindow& g, std::int64_t r0, std::int64_t r1) {
  const int K = g.kernel;
  const std::size_t patch = static_cast<std::size_t>(K) * K * g.c;
  Vec cols(static_cast<std::size_t>(r1 - r0) * patch, 0.0);
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (g.out_h * g.out_w);
    const int oh = static_cast<int>(r / g.out_w % g.out_h), ow = static_cast<int>(r % g.out_w);
    for (int kh = 0; kh < K; ++kh)
      for (int kw = 0; kw < K; ++kw)
        for (int ic = 0; ic < g.c; ++ic) {
          const int ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
          if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
            cols[static_cast<std::size_t>(r - r0) * patch + static_cast<std::size_t>(kh * K + kw) * g.c + ic] =
                in[idx(g, n, ih, iw, ic)];
        }
  }
  return cols;
}

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

// Adaptive pooling's window along one side.
int adaptive_begin(int o, int in, int out) { return static_cast<int>(std::floor(double(o) * in / out)); }
int adaptive_end(int o, int in, int out) { return static_cast<int>(std::ceil(double(o + 1) * in / out)); }

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void add_cnn_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const auto rnd = [&](std::size_t n, float scale = 1.f) { return ref::random_floats(rng, n, scale); };

  // A 3x3 stride-2 convolution with padding over 2 images of 5x6x3: 3x3 outputs, K = 27.
  const CnnWindow conv{2, 5, 6, 3, 3, 3, 3, 2, 1};
  const std::int64_t conv_rows = 2 * 3 * 3;
  const std::size_t patch = 27, conv_in = 2 * 5 * 6 * 3;
  {
    const auto in = rnd(conv_in);
    cases.push_back({OpKind::CnnIm2col, "cnn_im2col (3x3 stride 2 pad 1, rows [4, 13))", kExact,
                     [=](DeviceBuffers& b, bool poison) {
                       float* cols = b.zeros(9 * patch);
                       b.backend().cnn_im2col(cols, b.upload(poisoned(in, poison)), conv, 4, 13, b.stream());
                       return Outputs{{"cols", b.download(cols, 9 * patch)}};
                     },
                     [=] { return Expected{{"cols", ref_im2col(in, conv, 4, 13)}}; }});
  }
  {
    const auto din0 = rnd(conv_in), dcols = rnd(static_cast<std::size_t>(conv_rows) * patch);
    cases.push_back(
        {OpKind::CnnCol2im, "cnn_col2im (+=, blocks [0, 7) [7, 18))", kFewUlp,
         [=](DeviceBuffers& b, bool poison) {
           float* din = b.upload(din0);
           const float* d = b.upload(poisoned(dcols, poison));
           b.backend().cnn_col2im(din, d, conv, 0, 7, b.stream());
           b.backend().cnn_col2im(din, d + 7 * patch, conv, 7, conv_rows, b.stream());
           return Outputs{{"din", b.download(din, conv_in)}};
         },
         [=] {
           // The transpose of im2col: every patch element back to the input cell it came from.
           Vec din = to_double(din0);
           std::vector<float> probe(conv_in);
           for (std::size_t e = 0; e < conv_in; ++e) {
             std::fill(probe.begin(), probe.end(), 0.0f);
             probe[e] = 1.0f;
             const Vec cols = ref_im2col(probe, conv, 0, conv_rows);
             for (std::size_t k = 0; k < cols.size(); ++k) din[e] += cols[k] * dcols[k];
           }
           return Expected{{"din", din}};
         }});
  }

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

  // Max pooling 3x3 stride 2 pad 1 (ResNet's) over 2 images of 5x5x3: 3x3 outputs.
  const CnnWindow pool{2, 5, 5, 3, 3, 3, 3, 2, 1};
  const std::int64_t pool_rows = 18;
  const std::size_t pool_in = 2 * 5 * 5 * 3, pool_out = pool_rows * 3;
  const auto pool_x = rnd(pool_in);
  // The reference's maxima and where they are (random floats: no ties).
  Vec max_out(pool_out);
  std::vector<std::int64_t> max_at(pool_out);
  for (std::int64_t r = 0; r < pool_rows; ++r)
    for (int c = 0; c < 3; ++c) {
      const std::int64_t n = r / 9;
      const int oh = static_cast<int>(r / 3 % 3), ow = static_cast<int>(r % 3);
      double best = -INFINITY;
      for (int ih = std::max(0, oh * 2 - 1); ih <= std::min(4, oh * 2 + 1); ++ih)
        for (int iw = std::max(0, ow * 2 - 1); iw <= std::min(4, ow * 2 + 1); ++iw)
          if (pool_x[idx(pool, n, ih, iw, c)] > best) {
            best = pool_x[idx(pool, n, ih, iw, c)];
            max_at[r * 3 + c] = static_cast<std::int64_t>(idx(pool, n, ih, iw, c));
          }
      max_out[r * 3 + c] = best;
    }
  cases.push_back({OpKind::MaxPoolForward, "max_pool_forward (3x3 stride 2 pad 1, rows [5, 16))", kExact,
                   [=](DeviceBuffers& b, bool poison) {
                     float* out = b.zeros(pool_out);
                     auto* argmax = upload_as(b, std::vector<std::int64_t>(pool_out, -1));
                     b.backend().max_pool_forward(out, argmax, b.upload(poisoned(pool_x, poison)), pool, 5, 16,
                                                  b.stream());
                     const std::vector<float> all = b.download(out, pool_out);
                     const std::vector<std::int64_t> at = download_as(b, argmax, pool_out);
                     return Outputs{{"out", std::vector<float>(all.begin() + 15, all.begin() + 48)},
                                    {"argmax", as_floats(std::vector<std::int64_t>(at.begin() + 15, at.begin() + 48))}};
                   },
                   [=] {
                     return Expected{{"out", Vec(max_out.begin() + 15, max_out.begin() + 48)},
                                     {"argmax", Vec(max_at.begin() + 15, max_at.begin() + 48)}};
                   }});
  {
    const auto din0 = rnd(pool_in), dout = rnd(pool_out);
    cases.push_back({OpKind::MaxPoolBackward, "max_pool_backward (+=, blocks [0, 8) [8, 18))", kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* din = b.upload(din0);
                       const float* d = b.upload(poisoned(dout, poison));
                       const std::int64_t* at = upload_as(b, max_at);
                       b.backend().max_pool_backward(din, d, at, pool, 0, 8, b.stream());
                       b.backend().max_pool_backward(din, d, at, pool, 8, pool_rows, b.stream());
                       return Outputs{{"din", b.download(din, pool_in)}};
                     },
                     [=] {
                       Vec din = to_double(din0);
                       for (std::size_t i = 0; i < pool_out; ++i) din[max_at[i]] += dout[i];
                       return Expected{{"din", din}};
                     }});
  }

  // Adaptive average pooling 5x7 -> 3x2 (overlapping windows), 2 images of 4 channels.
  const CnnWindow avg{2, 5, 7, 4, 3, 2, 1, 1, 0};
  const std::int64_t avg_rows = 2 * 3 * 2;
  const std::size_t avg_in = 2 * 5 * 7 * 4, avg_out = avg_rows * 4;
  const auto for_each_cell = [=](auto&& f) {  // f(output element, input element, cells)
    for (std::int64_t r = 0; r < avg_rows; ++r) {
      const std::int64_t n = r / 6;
      const int oh = static_cast<int>(r / 2 % 3), ow = static_cast<int>(r % 2);
      const int h0 = adaptive_begin(oh, 5, 3), h1 = adaptive_end(oh, 5, 3);
      const int w0 = adaptive_begin(ow, 7, 2), w1 = adaptive_end(ow, 7, 2);
      for (int c = 0; c < 4; ++c)
        for (int ih = h0; ih < h1; ++ih)
          for (int iw = w0; iw < w1; ++iw) f(r * 4 + c, idx(avg, n, ih, iw, c), (h1 - h0) * (w1 - w0));
    }
  };
  {
    const auto x = rnd(avg_in);
    cases.push_back({OpKind::AvgPoolForward, "adaptive_avg_pool_forward (5x7 -> 3x2, rows [3, 12))", kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* out = b.zeros(avg_out);
                       b.backend().adaptive_avg_pool_forward(out, b.upload(poisoned(x, poison)), avg, 3, avg_rows,
                                                             b.stream());
                       const std::vector<float> all = b.download(out, avg_out);
                       return Outputs{{"out", std::vector<float>(all.begin() + 12, all.end())}};
                     },
                     [=] {
                       Vec out(avg_out, 0.0);
                       for_each_cell([&](std::size_t o, std::size_t i, int cells) { out[o] += x[i] / cells; });
                       return Expected{{"out", Vec(out.begin() + 12, out.end())}};
                     }});
    const auto din0 = rnd(avg_in), dout = rnd(avg_out);
    cases.push_back({OpKind::AvgPoolBackward, "adaptive_avg_pool_backward (+=, blocks [0, 5) [5, 12))", kFewUlp,
                     [=](DeviceBuffers& b, bool poison) {
                       float* din = b.upload(din0);
                       const float* d = b.upload(poisoned(dout, poison));
                       b.backend().adaptive_avg_pool_backward(din, d, avg, 0, 5, b.stream());
                       b.backend().adaptive_avg_pool_backward(din, d, avg, 5, avg_rows, b.stream());
                       return Outputs{{"din", b.download(din, avg_in)}};
                     },
                     [=] {
                       Vec din = to_double(din0);
                       for_each_cell([&](std::size_t o, std::size_t i, int cells) { din[i] += dout[o] / cells; });
                       return Expected{{"din", din}};
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
