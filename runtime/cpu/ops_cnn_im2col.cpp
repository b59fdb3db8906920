// A convolution's im2col and col2im on NHWC rows (moved from lanes/builtin/cnn/conv2d_layer.cpp).
#include <cstring>

#include "runtime/cpu/cpu_ops_cnn.h"

namespace pipelane::cpu {

void cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1) {
  const int H = g.h, W = g.w, IC = g.c, OH = g.out_h, OW = g.out_w, K = g.kernel;
  const std::size_t patch = static_cast<std::size_t>(K) * K * IC;
  const std::size_t ic_bytes = static_cast<std::size_t>(IC) * sizeof(float);
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
    float* col = cols + static_cast<std::size_t>(r - r0) * patch;
    for (int kh = 0; kh < K; ++kh) {
      const int ih = oh * g.stride - g.pad + kh;
      for (int kw = 0; kw < K; ++kw) {
        const int iw = ow * g.stride - g.pad + kw;
        float* dst = col + static_cast<std::size_t>(kh * K + kw) * IC;
        if (ih < 0 || ih >= H || iw < 0 || iw >= W) std::memset(dst, 0, ic_bytes);
        else std::memcpy(dst, in + ((n * H + ih) * W + iw) * IC, ic_bytes);
      }
    }
  }
}

void cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0, std::int64_t r1) {
  const int H = g.h, W = g.w, IC = g.c, OH = g.out_h, OW = g.out_w, K = g.kernel;
  const std::size_t patch = static_cast<std::size_t>(K) * K * IC;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
    const float* col = dcols + static_cast<std::size_t>(r - r0) * patch;
    for (int kh = 0; kh < K; ++kh) {
      const int ih = oh * g.stride - g.pad + kh;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < K; ++kw) {
        const int iw = ow * g.stride - g.pad + kw;
        if (iw < 0 || iw >= W) continue;
        const float* src = col + static_cast<std::size_t>(kh * K + kw) * IC;
        float* dst = din + ((n * H + ih) * W + iw) * IC;
        for (int ic = 0; ic < IC; ++ic) dst[ic] += src[ic];
      }
    }
  }
}

}  // namespace pipelane::cpu
