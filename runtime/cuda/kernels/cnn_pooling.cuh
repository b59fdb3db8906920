// Max and adaptive average pooling (Backend::max_pool_*, adaptive_avg_pool_*): forward one thread
// per output element (the CPU op's window order); backward a gather, one thread per input element
// in the pixels the block read, adding its outputs' gradients in ascending output row from its old
// value (the CPU scatter's order, no atomics).
#pragma once
#include "runtime/cuda/cuda_ops_cnn.h"
#include "runtime/cuda/kernels/cnn_common.cuh"

namespace pipelane::cuda {

// Adaptive pooling: output cell o of `out` covers input [floor(o*in/out), ceil((o+1)*in/out)).
__host__ __device__ inline int adaptive_begin(int o, int in, int out) { return o * in / out; }
__host__ __device__ inline int adaptive_end(int o, int in, int out) { return ((o + 1) * in + out - 1) / out; }

struct MaxPoolForward {
  float* out;
  std::int64_t* argmax;
  const float* in;
  CnnWindow g;
  std::int64_t r0;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t r = r0 + static_cast<std::int64_t>(i / g.c);
    const int c = static_cast<int>(i % g.c);
    const std::int64_t n = r / (static_cast<std::int64_t>(g.out_h) * g.out_w);
    const int oh = static_cast<int>(r / g.out_w % g.out_h), ow = static_cast<int>(r % g.out_w);
    bool found = false;
    std::int64_t best = 0;
    float best_value = 0.0f;
    // Strictly greater keeps the first maximum; the first valid cell starts (a NaN there stays).
    for (int kh = 0; kh < g.kernel; ++kh) {
      const int ih = oh * g.stride - g.pad + kh;
      if (ih < 0 || ih >= g.h) continue;
      for (int kw = 0; kw < g.kernel; ++kw) {
        const int iw = ow * g.stride - g.pad + kw;
        if (iw < 0 || iw >= g.w) continue;
        const std::int64_t at = ((n * g.h + ih) * g.w + iw) * g.c + c;
        const float v = in[at];
        if (!found || v > best_value) {
          best = at;
          best_value = v;
        }
        found = true;
      }
    }
    out[r * g.c + c] = best_value;
    argmax[r * g.c + c] = best;
  }
};

struct MaxPoolBackward {
  float* din;
  const float* dout;
  const std::int64_t* argmax;
  CnnWindow g;
  std::int64_t r0, r1, first_pixel;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t pixel = first_pixel + static_cast<std::int64_t>(i / g.c);
    const std::int64_t element = pixel * g.c + static_cast<std::int64_t>(i % g.c);
    const std::int64_t n = pixel / (static_cast<std::int64_t>(g.h) * g.w);
    const int ih = static_cast<int>(pixel / g.w % g.h), iw = static_cast<int>(pixel % g.w);
    float acc = din[element];
    for (int kh = g.kernel - 1; kh >= 0; --kh) {
      const int t = ih + g.pad - kh;
      if (t < 0 || t % g.stride != 0 || t / g.stride >= g.out_h) continue;
      for (int kw = g.kernel - 1; kw >= 0; --kw) {
        const int u = iw + g.pad - kw;
        if (u < 0 || u % g.stride != 0 || u / g.stride >= g.out_w) continue;
        const std::int64_t r = (n * g.out_h + t / g.stride) * g.out_w + u / g.stride;
        if (r < r0 || r >= r1) continue;
        const std::int64_t o = r * g.c + (element % g.c);
        if (argmax[o] == element) acc += dout[o];
      }
    }
    din[element] = acc;
  }
};

struct AvgPoolForward {
  float* out;
  const float* in;
  CnnWindow g;
  std::int64_t r0;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t r = r0 + static_cast<std::int64_t>(i / g.c);
    const int c = static_cast<int>(i % g.c);
    const std::int64_t n = r / (static_cast<std::int64_t>(g.out_h) * g.out_w);
    const int oh = static_cast<int>(r / g.out_w % g.out_h), ow = static_cast<int>(r % g.out_w);
    const int h0 = adaptive_begin(oh, g.h, g.out_h), h1 = adaptive_end(oh, g.h, g.out_h);
    const int w0 = adaptive_begin(ow, g.w, g.out_w), w1 = adaptive_end(ow, g.w, g.out_w);
    float sum = 0.0f;
    for (int ih = h0; ih < h1; ++ih)
      for (int iw = w0; iw < w1; ++iw) sum += in[((n * g.h + ih) * g.w + iw) * g.c + c];
    out[r * g.c + c] = sum / static_cast<float>((h1 - h0) * (w1 - w0));
  }
};

struct AvgPoolBackward {
  float* din;
  const float* dout;
  CnnWindow g;
  std::int64_t r0, r1, first_pixel;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t pixel = first_pixel + static_cast<std::int64_t>(i / g.c);
    const int c = static_cast<int>(i % g.c);
    const std::int64_t n = pixel / (static_cast<std::int64_t>(g.h) * g.w);
    const int ih = static_cast<int>(pixel / g.w % g.h), iw = static_cast<int>(pixel % g.w);
    float acc = din[pixel * g.c + c];
    for (int oh = 0; oh < g.out_h; ++oh) {
      const int h0 = adaptive_begin(oh, g.h, g.out_h), h1 = adaptive_end(oh, g.h, g.out_h);
      if (ih < h0 || ih >= h1) continue;
      for (int ow = 0; ow < g.out_w; ++ow) {
        const int w0 = adaptive_begin(ow, g.w, g.out_w), w1 = adaptive_end(ow, g.w, g.out_w);
        if (iw < w0 || iw >= w1) continue;
        const std::int64_t r = (n * g.out_h + oh) * g.out_w + ow;
        if (r < r0 || r >= r1) continue;
        acc += dout[r * g.c + c] / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
    din[pixel * g.c + c] = acc;
  }
};

void max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g, std::int64_t r0,
                      std::int64_t r1, cudaStream_t stream) {
  if (r1 <= r0) return;
  cnn_for_each("max_pool_forward", MaxPoolForward{out, argmax, in, g, r0}, static_cast<std::size_t>(r1 - r0) * g.c,
               stream);
}

void max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                       std::int64_t r0, std::int64_t r1, cudaStream_t stream) {
  if (r1 <= r0) return;
  const PixelRange p = pixels_read(
      g, r0, r1, [&](int oh) { return oh * g.stride - g.pad; }, [&](int oh) { return oh * g.stride - g.pad + g.kernel - 1; });
  cnn_for_each("max_pool_backward", MaxPoolBackward{din, dout, argmax, g, r0, r1, p.first},
               static_cast<std::size_t>(p.end - p.first) * g.c, stream);
}

void adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                               cudaStream_t stream) {
  if (r1 <= r0) return;
  cnn_for_each("adaptive_avg_pool_forward", AvgPoolForward{out, in, g, r0}, static_cast<std::size_t>(r1 - r0) * g.c,
               stream);
}

void adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                std::int64_t r1, cudaStream_t stream) {
  if (r1 <= r0) return;
  const PixelRange p = pixels_read(
      g, r0, r1, [&](int oh) { return adaptive_begin(oh, g.h, g.out_h); },
      [&](int oh) { return adaptive_end(oh, g.h, g.out_h) - 1; });
  cnn_for_each("adaptive_avg_pool_backward", AvgPoolBackward{din, dout, g, r0, r1, p.first},
               static_cast<std::size_t>(p.end - p.first) * g.c, stream);
}

}  // namespace pipelane::cuda
