// The CNN lanes' window ops (Backend's CNN family: im2col, col2im, max and adaptive average
// pooling) as backend op cases: odd shapes, blocks of output rows with odd boundaries (the lanes cut
// every phase into blocks), input gradients accumulating onto random values, against double
// references written from the definitions. The rest of the family: backend_op_cases_cnn_training.cpp.
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

// Adaptive pooling's window along one side.
int adaptive_begin(int o, int in, int out) { return static_cast<int>(std::floor(double(o) * in / out)); }
int adaptive_end(int o, int in, int out) { return static_cast<int>(std::ceil(double(o + 1) * in / out)); }

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

  add_cnn_training_cases(cases, rng);
}

}  // namespace pipelane::backend_ops
