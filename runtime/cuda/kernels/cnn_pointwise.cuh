// ReLU forward and backward in place, and inverted dropout with a counter-based mask
// (Backend::relu_*, dropout): one thread per element.
#pragma once
#include "runtime/cuda/cuda_ops_cnn.h"
#include "runtime/cuda/kernels/cnn_common.cuh"

namespace pipelane::cuda {

// splitmix64's finaliser (Backend::dropout; lanes/builtin/cnn/cnn_random.h's mix64).
__device__ inline std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct ReluForward {
  float* x;
  __device__ void operator()(std::size_t i) const { x[i] = x[i] > 0 ? x[i] : 0.0f; }
};

struct ReluBackward {
  float* dx;
  const float* y;
  __device__ void operator()(std::size_t i) const { dx[i] = y[i] > 0 ? dx[i] : 0.0f; }
};

struct Dropout {
  float* x;
  std::uint64_t key, first;
  float p, keep_scale;
  __device__ void operator()(std::size_t i) const {
    const double u = static_cast<double>(splitmix64(key + first + i) >> 40) * 0x1p-24;
    x[i] = u < p ? 0.0f : x[i] * keep_scale;
  }
};

void relu_forward(float* x, std::size_t n, cudaStream_t stream) { cnn_for_each("relu_forward", ReluForward{x}, n, stream); }

void relu_backward(float* dx, const float* y, std::size_t n, cudaStream_t stream) {
  cnn_for_each("relu_backward", ReluBackward{dx, y}, n, stream);
}

void dropout(float* x, std::size_t n, std::uint64_t key, std::uint64_t first, float p, cudaStream_t stream) {
  cnn_for_each("dropout", Dropout{x, key, first, p, 1.0f / (1.0f - p)}, n, stream);
}

}  // namespace pipelane::cuda
