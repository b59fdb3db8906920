// What the CNN kernels (cnn_*.cuh) share: a grid-stride launch over n elements, the pixel range
// of an input that a block of output rows reads, and the NHWC index arithmetic.
#pragma once
#include <algorithm>

#include "runtime/backend.h"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kCnnThreads = 256;
constexpr int kCnnChannelThreads = 64;  // per-channel kernels (batch norm): one thread a channel

template <typename F>
static __global__ void cnn_elementwise_kernel(F f, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

// f(i) for every i < n, any grid (each element is one thread's).
template <typename F>
void cnn_for_each(const char* name, F f, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  ::pipelane::cuda::launch(name, cnn_elementwise_kernel<F>, dim3(elementwise_blocks(n, kCnnThreads)),
                           dim3(kCnnThreads), 0, stream, f, n);
}

// f(c) for every channel c < C, one thread each.
template <typename F>
void cnn_for_each_channel(const char* name, F f, int C, cudaStream_t stream) {
  if (C <= 0) return;
  ::pipelane::cuda::launch(name, cnn_elementwise_kernel<F>, dim3(ceil_div(static_cast<std::size_t>(C), kCnnChannelThreads)),
                           dim3(kCnnChannelThreads), 0, stream, f, static_cast<std::size_t>(C));
}

// Input pixels [first, end) (flat (n*h + ih)*w + iw) that output rows [r0, r1) of a window read:
// from the first row's image and top input row to the last one's image and bottom input row.
// `top(oh)` / `bottom(oh)` give the input rows an output row oh reads (clamped here).
struct PixelRange {
  std::int64_t first = 0, end = 0;
};
template <typename Top, typename Bottom>
PixelRange pixels_read(const CnnWindow& g, std::int64_t r0, std::int64_t r1, Top top, Bottom bottom) {
  const std::int64_t per_image = static_cast<std::int64_t>(g.out_h) * g.out_w;
  const std::int64_t n0 = r0 / per_image, n1 = (r1 - 1) / per_image;
  const int oh0 = static_cast<int>(r0 / g.out_w % g.out_h), oh1 = static_cast<int>((r1 - 1) / g.out_w % g.out_h);
  const int ih0 = std::max(0, top(oh0)), ih1 = std::min(g.h - 1, bottom(oh1));
  PixelRange p;
  p.first = (n0 * g.h + ih0) * g.w;
  p.end = std::max(p.first, (n1 * g.h + ih1 + 1) * g.w);
  return p;
}

}  // namespace pipelane::cuda
