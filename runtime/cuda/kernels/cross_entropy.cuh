// Softmax cross-entropy over a chunk of LM-head logits, one block per row: the fused head never
// holds more than a chunk of logits (cuBLASLt writes it, these kernels turn it into losses and,
// in place, into dlogits). Only the first `valid` columns are tokens; the rest is vocab padding:
// excluded from the softmax, zero in dlogits. Sums are per-thread partials over a fixed stride,
// then a fixed tree (block_sum): the same bits on every run.
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kCrossEntropyThreads = 256;

template <typename floatX>
__device__ float row_max(const floatX* z, int valid, float* scratch) {
  float m = -INFINITY;
  for (int v = threadIdx.x; v < valid; v += blockDim.x) m = fmaxf(m, to_float(z[v]));
  return block_max(m, scratch);
}

template <typename floatX>
__device__ float row_sum_exp(const floatX* z, int valid, float maxv, float* scratch) {
  float s = 0.f;
  for (int v = threadIdx.x; v < valid; v += blockDim.x) s += expf(to_float(z[v]) - maxv);
  return block_sum(s, scratch);
}

// z <- grad_scale * (softmax - onehot(local_target)) on [0, valid), 0 on [valid, width). Each
// thread rewrites only the columns it reads.
template <typename floatX>
__device__ void write_dlogits(floatX* z, int width, int valid, float maxv, float sum,
                              int local_target, float grad_scale) {
  const float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < width; v += blockDim.x) {
    float d = 0.f;
    if (v < valid) {
      d = expf(to_float(z[v]) - maxv) * inv * grad_scale;
      if (v == local_target) d -= grad_scale;
    }
    z[v] = from_float<floatX>(d);
  }
}

template <typename floatX>
__global__ void cross_entropy_chunk_kernel(float* losses, floatX* logits,
                                           const std::int32_t* targets, int V, int Vp,
                                           float grad_scale, bool backward) {
  __shared__ float scratch[32];
  const int r = blockIdx.x;
  floatX* z = logits + static_cast<std::size_t>(r) * Vp;
  const int target = targets[r];
  const float maxv = row_max(z, V, scratch);
  const float target_logit = to_float(z[target]) - maxv;  // read before any thread rewrites z
  const float sum = row_sum_exp(z, V, maxv, scratch);     // (its barriers order the two)
  if (threadIdx.x == 0) losses[r] = logf(sum) - target_logit;
  if (backward) write_dlogits(z, Vp, V, maxv, sum, target, grad_scale);
}

template <typename floatX>
__global__ void cross_entropy_row_max_kernel(float* rowmax, const floatX* logits, int Vl,
                                             int valid) {
  __shared__ float scratch[32];
  const int r = blockIdx.x;
  const float m = row_max(logits + static_cast<std::size_t>(r) * Vl, valid, scratch);
  if (threadIdx.x == 0) rowmax[r] = m;
}

template <typename floatX>
__global__ void cross_entropy_row_sums_kernel(float* rowsum, float* rowtgt, const floatX* logits,
                                              const float* rowmax, const std::int32_t* targets,
                                              int Vl, int valid, int vocab_begin) {
  __shared__ float scratch[32];
  const int r = blockIdx.x;
  const floatX* z = logits + static_cast<std::size_t>(r) * Vl;
  const float maxv = rowmax[r];
  const float s = row_sum_exp(z, valid, maxv, scratch);
  if (threadIdx.x == 0) {
    const int local = targets[r] - vocab_begin;
    // Only the rank holding the target contributes; the others add an exact 0.
    rowtgt[r] = local >= 0 && local < valid ? to_float(z[local]) - maxv : 0.f;
    rowsum[r] = s;
  }
}

template <typename floatX>
__global__ void cross_entropy_finish_kernel(float* losses, floatX* logits, const float* rowmax,
                                            const float* rowsum, const float* rowtgt,
                                            const std::int32_t* targets, int Vl, int valid,
                                            int vocab_begin, float grad_scale, bool backward) {
  const int r = blockIdx.x;
  const float sum = rowsum[r];
  if (threadIdx.x == 0) losses[r] = logf(sum) - rowtgt[r];
  if (backward)
    write_dlogits(logits + static_cast<std::size_t>(r) * Vl, Vl, valid, rowmax[r], sum,
                  targets[r] - vocab_begin, grad_scale);
}

template <typename floatX>
void cross_entropy_chunk(float* losses, floatX* logits, const std::int32_t* targets, int rows,
                         int V, int Vp, float grad_scale, bool backward, cudaStream_t stream) {
  if (rows <= 0) return;
  PIPELANE_LAUNCH(cross_entropy_chunk_kernel<floatX>, dim3(rows), dim3(kCrossEntropyThreads), 0,
                  stream, losses, logits, targets, V, Vp, grad_scale, backward);
}

template <typename floatX>
void cross_entropy_chunk_row_max(float* rowmax, const floatX* logits, int rows, int Vl, int valid,
                                 cudaStream_t stream) {
  if (rows <= 0) return;
  PIPELANE_LAUNCH(cross_entropy_row_max_kernel<floatX>, dim3(rows), dim3(kCrossEntropyThreads), 0,
                  stream, rowmax, logits, Vl, valid);
}

template <typename floatX>
void cross_entropy_chunk_row_sums(float* rowsum, float* rowtgt, const floatX* logits,
                                  const float* rowmax, const std::int32_t* targets, int rows,
                                  int Vl, int valid, int vocab_begin, cudaStream_t stream) {
  if (rows <= 0) return;
  PIPELANE_LAUNCH(cross_entropy_row_sums_kernel<floatX>, dim3(rows), dim3(kCrossEntropyThreads), 0,
                  stream, rowsum, rowtgt, logits, rowmax, targets, Vl, valid, vocab_begin);
}

template <typename floatX>
void cross_entropy_chunk_finish(float* losses, floatX* logits, const float* rowmax,
                                const float* rowsum, const float* rowtgt,
                                const std::int32_t* targets, int rows, int Vl, int valid,
                                int vocab_begin, float grad_scale, bool backward,
                                cudaStream_t stream) {
  if (rows <= 0) return;
  PIPELANE_LAUNCH(cross_entropy_finish_kernel<floatX>, dim3(rows), dim3(kCrossEntropyThreads), 0,
                  stream, losses, logits, rowmax, rowsum, rowtgt, targets, Vl, valid, vocab_begin,
                  grad_scale, backward);
}

}  // namespace pipelane::cuda
