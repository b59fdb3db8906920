// A convolution's im2col (one thread per patch element) and col2im as a gather: one thread per
// input element in the pixels the block read, adding the dcols elements taken from it in
// ascending output row (kh, kw descending), from its old value: the CPU scatter's order, no atomics.
#pragma once
#include "runtime/cuda/cuda_ops_cnn.h"
#include "runtime/cuda/kernels/cnn_common.cuh"

namespace pipelane::cuda {

struct Im2col {
  float* cols;
  const float* in;
  CnnWindow g;
  std::int64_t r0;
  std::size_t patch;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t r = r0 + static_cast<std::int64_t>(i / patch);
    const int k = static_cast<int>(i % patch), cell = k / g.c, ic = k % g.c;
    const int kh = cell / g.kernel, kw = cell % g.kernel;
    const std::int64_t n = r / (static_cast<std::int64_t>(g.out_h) * g.out_w);
    const int oh = static_cast<int>(r / g.out_w % g.out_h), ow = static_cast<int>(r % g.out_w);
    const int ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
    const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
    cols[i] = inside ? in[((n * g.h + ih) * g.w + iw) * g.c + ic] : 0.0f;
  }
};

struct Col2im {
  float* din;
  const float* dcols;
  CnnWindow g;
  std::int64_t r0, r1, first_pixel;
  std::size_t patch;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t pixel = first_pixel + static_cast<std::int64_t>(i / g.c);
    const int ic = static_cast<int>(i % g.c);
    const std::int64_t n = pixel / (static_cast<std::int64_t>(g.h) * g.w);
    const int ih = static_cast<int>(pixel / g.w % g.h), iw = static_cast<int>(pixel % g.w);
    float acc = din[pixel * g.c + ic];
    for (int kh = g.kernel - 1; kh >= 0; --kh) {
      const int t = ih + g.pad - kh;
      if (t < 0 || t % g.stride != 0 || t / g.stride >= g.out_h) continue;
      const int oh = t / g.stride;
      for (int kw = g.kernel - 1; kw >= 0; --kw) {
        const int u = iw + g.pad - kw;
        if (u < 0 || u % g.stride != 0 || u / g.stride >= g.out_w) continue;
        const std::int64_t r = (n * g.out_h + oh) * g.out_w + u / g.stride;
        if (r < r0 || r >= r1) continue;
        acc += dcols[static_cast<std::size_t>(r - r0) * patch + static_cast<std::size_t>(kh * g.kernel + kw) * g.c + ic];
      }
    }
    din[pixel * g.c + ic] = acc;
  }
};

void cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                cudaStream_t stream) {
  if (r1 <= r0) return;
  const std::size_t patch = static_cast<std::size_t>(g.kernel) * g.kernel * g.c;
  cnn_for_each("cnn_im2col", Im2col{cols, in, g, r0, patch}, static_cast<std::size_t>(r1 - r0) * patch, stream);
}

void cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                cudaStream_t stream) {
  if (r1 <= r0) return;
  const std::size_t patch = static_cast<std::size_t>(g.kernel) * g.kernel * g.c;
  const PixelRange p = pixels_read(
      g, r0, r1, [&](int oh) { return oh * g.stride - g.pad; }, [&](int oh) { return oh * g.stride - g.pad + g.kernel - 1; });
  cnn_for_each("cnn_col2im", Col2im{din, dcols, g, r0, r1, p.first, patch},
               static_cast<std::size_t>(p.end - p.first) * g.c, stream);
}

}  // namespace pipelane::cuda
