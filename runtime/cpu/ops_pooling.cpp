// Max and adaptive average pooling on NHWC rows (moved from lanes/builtin/cnn/pooling_layers.cpp).
#include <vector>

#include "runtime/cpu/cpu_ops_cnn.h"

namespace pipelane::cpu {
namespace {

struct Window {
  int h0, h1, w0, w1;
};

// Output cell i covers input [floor(i*In/Out), ceil((i+1)*In/Out)).
Window adaptive_window(const CnnWindow& g, std::int64_t r) {
  const int OH = g.out_h, OW = g.out_w, H = g.h, W = g.w;
  const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
  return {oh * H / OH, ((oh + 1) * H + OH - 1) / OH, ow * W / OW, ((ow + 1) * W + OW - 1) / OW};
}

}  // namespace

void max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g, std::int64_t r0,
                      std::int64_t r1) {
  const int H = g.h, W = g.w, C = g.c, OH = g.out_h, OW = g.out_w, K = g.kernel;
  std::vector<std::int64_t> cells(static_cast<std::size_t>(K) * K);
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
    // The window's valid cells, then every channel over them with selects rather than branches
    // (random data: branches mispredict); strictly greater keeps the first maximum.
    int count = 0;
    for (int kh = 0; kh < K; ++kh) {
      const int ih = oh * g.stride - g.pad + kh;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < K; ++kw) {
        const int iw = ow * g.stride - g.pad + kw;
        if (iw >= 0 && iw < W) cells[count++] = ((n * H + ih) * W + iw) * C;
      }
    }
    for (int c = 0; c < C; ++c) {
      std::int64_t best = cells[0] + c;
      float best_value = in[best];
      for (int k = 1; k < count; ++k) {
        const std::int64_t at = cells[k] + c;
        const bool greater = in[at] > best_value;
        best_value = greater ? in[at] : best_value;
        best = greater ? at : best;
      }
      out[r * C + c] = best_value;
      argmax[r * C + c] = best;
    }
  }
}

void max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                       std::int64_t r0, std::int64_t r1) {
  const int C = g.c;
  for (std::int64_t i = r0 * C; i < r1 * C; ++i) din[argmax[i]] += dout[i];
}

void adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1) {
  const int H = g.h, W = g.w, C = g.c, OH = g.out_h, OW = g.out_w;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const Window win = adaptive_window(g, r);
    const float count = static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
    float* o = out + r * C;
    for (int c = 0; c < C; ++c) o[c] = 0;
    for (int ih = win.h0; ih < win.h1; ++ih)
      for (int iw = win.w0; iw < win.w1; ++iw) {
        const float* x = in + ((n * H + ih) * W + iw) * C;
        for (int c = 0; c < C; ++c) o[c] += x[c];
      }
    for (int c = 0; c < C; ++c) o[c] /= count;
  }
}

void adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                std::int64_t r1) {
  const int H = g.h, W = g.w, C = g.c, OH = g.out_h, OW = g.out_w;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const Window win = adaptive_window(g, r);
    const float count = static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
    const float* gr = dout + r * C;
    for (int ih = win.h0; ih < win.h1; ++ih)
      for (int iw = win.w0; iw < win.w1; ++iw) {
        float* dx = din + ((n * H + ih) * W + iw) * C;
        for (int c = 0; c < C; ++c) dx[c] += gr[c] / count;
      }
  }
}

}  // namespace pipelane::cpu
