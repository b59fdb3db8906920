// Causal attention of a chunk of queries over a KV cache (chunked prefill, decoding), one block
// per (query, head). Keys are taken a tile at a time with an online softmax (running max and sum,
// earlier partial results rescaled), so the cache can have any length with fixed shared memory.
// Each thread owns up to two output dimensions (hs <= 256). Fixed order everywhere: deterministic.
// Grouped-query attention (`group` = NH/KVH query heads per cache head) reads cache head h/group.
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kKvThreads = 128;  // also the keys per tile
constexpr int kKvMaxHeadSize = 2 * kKvThreads;

template <typename floatX>
__global__ void attention_kv_cache_kernel(floatX* out, const floatX* q, int q_stride,
                                          const floatX* kcache, const floatX* vcache, int kv_stride,
                                          int p0, int C, int hs, float scale, int group) {
  __shared__ float qs[kKvMaxHeadSize];
  __shared__ float p[kKvThreads];  // the tile's scores, then their exp
  __shared__ float scratch[32];
  const int i = blockIdx.x, h = blockIdx.y;
  const int pos = p0 + i;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  const int d0 = tid, d1 = tid + kKvThreads;
  const std::size_t head = static_cast<std::size_t>(h) * hs, kv_head = static_cast<std::size_t>(h / group) * hs;
  const floatX* qrow = q + static_cast<std::size_t>(i) * q_stride + head;
  for (int d = tid; d < hs; d += blockDim.x) qs[d] = to_float(qrow[d]);
  __syncthreads();
  float m = -INFINITY, l = 0.f, acc0 = 0.f, acc1 = 0.f;
  for (int j0 = 0; j0 <= pos; j0 += kKvThreads) {
    const int tile = pos + 1 - j0 < kKvThreads ? pos + 1 - j0 : kKvThreads;
    for (int k = warp; k < tile; k += warps) {  // a warp per key, lanes over dimensions
      const floatX* key = kcache + static_cast<std::size_t>(j0 + k) * kv_stride + kv_head;
      float dot = 0.f;
      for (int d = lane; d < hs; d += 32) dot += qs[d] * to_float(key[d]);
      dot = warp_sum(dot);
      if (lane == 0) p[k] = dot * scale;
    }
    __syncthreads();
    const float s = tid < tile ? p[tid] : -INFINITY;
    const float m_new = fmaxf(m, block_max(s, scratch));
    const float e = tid < tile ? expf(s - m_new) : 0.f;
    const float correction = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * correction + block_sum(e, scratch);
    if (tid < tile) p[tid] = e;
    __syncthreads();
    acc0 *= correction;
    acc1 *= correction;
    for (int k = 0; k < tile; ++k) {
      const floatX* val = vcache + static_cast<std::size_t>(j0 + k) * kv_stride + kv_head;
      if (d0 < hs) acc0 += p[k] * to_float(val[d0]);
      if (d1 < hs) acc1 += p[k] * to_float(val[d1]);
    }
    m = m_new;
    __syncthreads();  // p[] is rewritten by the next tile
  }
  floatX* o = out + static_cast<std::size_t>(i) * C + head;
  if (d0 < hs) o[d0] = from_float<floatX>(acc0 / l);
  if (d1 < hs) o[d1] = from_float<floatX>(acc1 / l);
}

template <typename floatX>
void attention_kv_cache_forward(floatX* out, const floatX* q, int q_stride, const floatX* kcache,
                                const floatX* vcache, int kv_stride, int n, int p0, int C, int NH,
                                cudaStream_t stream) {
  if (n <= 0) return;
  const int hs = C / NH;
  if (hs * NH != C || hs > kKvMaxHeadSize)
    throw std::invalid_argument(
        "attention_kv_cache_forward: head size C/NH must divide C and be <= " +
        std::to_string(kKvMaxHeadSize) + " (C=" + std::to_string(C) + ", NH=" + std::to_string(NH) +
        ")");
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  PIPELANE_LAUNCH(attention_kv_cache_kernel<floatX>, dim3(n, NH), dim3(kKvThreads), 0, stream, out,
                  q, q_stride, kcache, vcache, kv_stride, p0, C, hs, scale, 1);
}

template <typename floatX>
void attention_kv_cache_forward_gqa(floatX* out, const floatX* q, const floatX* kcache, const floatX* vcache, int n,
                                    int p0, int NH, int KVH, int hs, cudaStream_t stream) {
  if (n <= 0) return;
  if (KVH <= 0 || NH % KVH != 0 || hs > kKvMaxHeadSize)
    throw std::invalid_argument("attention_kv_cache_forward_gqa: kv heads must divide heads and hs be <= " +
                                std::to_string(kKvMaxHeadSize) + " (heads=" + std::to_string(NH) +
                                ", kv_heads=" + std::to_string(KVH) + ", hs=" + std::to_string(hs) + ")");
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  PIPELANE_LAUNCH(attention_kv_cache_kernel<floatX>, dim3(n, NH), dim3(kKvThreads), 0, stream, out, q, NH * hs,
                  kcache, vcache, KVH * hs, p0, NH * hs, hs, scale, NH / KVH);
}

}  // namespace pipelane::cuda
