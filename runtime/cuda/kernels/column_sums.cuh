// Deterministic column sums over rows, for parameter gradients (layernorm's dweight/dbias, a
// linear layer's dbias): out_k[c] += sum_n term_k(n, c) for K terms at once, without atomics.
// Stage 1 sums fixed chunks of kRowsPerChunk rows (cuda_ops.h) per column into
// scratch[K * row_chunks(N) * C] (one thread per column, rows in order); stage 2 sums a column's
// chunk partials in chunk order and adds them to out.
// The partition depends only on N, so the bits do not depend on the device or the run.
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kColumnThreads = 128;

// terms(n, c, float (&t)[K]) writes the K terms of row n, column c.
template <int K, typename Terms>
__global__ void column_partial_sums_kernel(float* partial, Terms terms, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y, chunks = gridDim.y;
  if (c >= C) return;
  float acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0.f;
  const int n1 = (chunk + 1) * kRowsPerChunk < N ? (chunk + 1) * kRowsPerChunk : N;
  for (int n = chunk * kRowsPerChunk; n < n1; ++n) {
    float t[K];
    terms(n, c, t);
    for (int k = 0; k < K; ++k) acc[k] += t[k];
  }
  for (int k = 0; k < K; ++k)
    partial[(static_cast<std::size_t>(k) * chunks + chunk) * C + c] = acc[k];
}

template <int K>
struct ColumnOutputs {
  float* out[K];
};

template <int K>
__global__ void column_sums_finish_kernel(ColumnOutputs<K> outs, const float* partial, int chunks,
                                          int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    float s = 0.f;
    for (int chunk = 0; chunk < chunks; ++chunk)
      s += partial[(static_cast<std::size_t>(k) * chunks + chunk) * C + c];
    outs.out[k][c] += s;
  }
}

template <int K, typename Terms>
void column_sums(ColumnOutputs<K> outs, Terms terms, int N, int C, float* scratch,
                 cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const unsigned chunks = ceil_div(N, kRowsPerChunk);
  PIPELANE_LAUNCH((column_partial_sums_kernel<K, Terms>), dim3(ceil_div(C, kColumnThreads), chunks),
                  dim3(kColumnThreads), 0, stream, scratch, terms, N, C);
  PIPELANE_LAUNCH((column_sums_finish_kernel<K>), dim3(ceil_div(C, kColumnThreads)),
                  dim3(kColumnThreads), 0, stream, outs, scratch, static_cast<int>(chunks), C);
}

}  // namespace pipelane::cuda
