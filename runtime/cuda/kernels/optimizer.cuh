// AdamW on fp32 master weights (optionally writing the bf16 compute copy) and the sum of squares
// behind the global gradient norm.
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/elementwise.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

// Host-computed constants, exactly as cpu::adamw_update computes them.
struct AdamWStep {
  float beta1, beta2, eps, step_size, bias2_sqrt, decay, grad_scale;
};

inline AdamWStep adamw_step(const AdamWParams& h, float grad_scale) {
  const float bias1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.t));
  const float bias2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.t));
  return AdamWStep{h.beta1,      h.beta2,          h.eps,
                   h.lr / bias1, std::sqrt(bias2), 1.0f - h.lr * h.weight_decay,
                   grad_scale};
}

// Same order of operations as torch.optim.AdamW's single-tensor path (and cpu::adamw_update).
template <typename floatX>
struct AdamW {
  float* param;
  const float* grad;
  float* m;
  float* v;
  floatX* param_copy;  // may be null
  AdamWStep s;
  __device__ void operator()(std::size_t i) const {
    const float g = grad[i] * s.grad_scale;
    float p = param[i] * s.decay;
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    const float denom = sqrtf(vi) / s.bias2_sqrt + s.eps;
    p -= s.step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (param_copy) param_copy[i] = from_float<floatX>(p);
  }
};

template <typename floatX>
void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                  const AdamWParams& h, float grad_scale, floatX* param_copy,
                  cudaStream_t stream) {
  for_each_element(AdamW<floatX>{param, grad, m, v, param_copy, adamw_step(h, grad_scale)}, n,
                   stream);
}

// Sum of squares: one double partial per fixed chunk of kSquaresChunk elements (threads take a
// fixed stride, then a fixed tree), then one block sums the partials the same way.
constexpr int kSquaresThreads = 256;

template <typename floatX>
__global__ void sum_squares_partial_kernel(double* partial, const floatX* x, std::size_t n) {
  __shared__ double scratch[32];
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * kSquaresChunk;
  const std::size_t end = begin + kSquaresChunk < n ? begin + kSquaresChunk : n;
  double s = 0.0;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double xi = to_float(x[i]);
    s += xi * xi;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

static __global__ void sum_squares_finish_kernel(double* result, const double* partial,
                                                 unsigned chunks) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (unsigned c = threadIdx.x; c < chunks; c += blockDim.x) s += partial[c];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *result = s;
}

template <typename floatX>
void sum_squares(double* result, const floatX* x, std::size_t n, double* scratch,
                 cudaStream_t stream) {
  const unsigned chunks = static_cast<unsigned>((n + kSquaresChunk - 1) / kSquaresChunk);
  if (chunks > 0)
    PIPELANE_LAUNCH(sum_squares_partial_kernel<floatX>, dim3(chunks), dim3(kSquaresThreads), 0,
                    stream, scratch, x, n);
  PIPELANE_LAUNCH(sum_squares_finish_kernel, dim3(1), dim3(kSquaresThreads), 0, stream, result,
                  scratch, chunks);
}

static __global__ void sum_in_order_kernel(double* result, const float* x, std::size_t n) {
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) s += x[i];
  *result = s;
}

// A non-template: defined once, in the one translation unit that includes this file.
void sum_in_order(double* result, const float* x, std::size_t n, cudaStream_t stream) {
  PIPELANE_LAUNCH(sum_in_order_kernel, dim3(1), dim3(1), 0, stream, result, x, n);
}

}  // namespace pipelane::cuda
