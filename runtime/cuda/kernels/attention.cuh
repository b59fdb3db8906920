// Causal attention around cuBLASLt's strided-batched GEMMs (llm.c's layout): qkv[B,T,3C] is
// permuted to q, k, v [B,NH,T,hs]; preatt = q k^T and y = att v are GEMMs (plans/gemm_plan.h);
// here the permutes and the causal softmax, one warp per row of att.
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/elementwise.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kSoftmaxRowsPerBlock = 8;

// Index arithmetic of the permutation: element i of [B,NH,T,hs] <-> its place in [B,T,parts*C].
struct HeadLayout {
  int NH, T, hs;
  // Offset in a [B,T,width] tensor of element i of [B,NH,T,hs] (before adding the part's offset).
  __device__ std::size_t row_major(std::size_t i, int width) const {
    const int d = static_cast<int>(i % hs);
    const int t = static_cast<int>(i / hs % T);
    const int h = static_cast<int>(i / (static_cast<std::size_t>(hs) * T) % NH);
    const std::size_t b = i / (static_cast<std::size_t>(hs) * T * NH);
    return (b * T + t) * width + static_cast<std::size_t>(h) * hs + d;
  }
};

template <typename floatX>
struct PermuteQkv {
  floatX *q, *k, *v;
  const floatX* qkv;
  HeadLayout L;
  int C;
  __device__ void operator()(std::size_t i) const {
    const std::size_t src = L.row_major(i, 3 * C);
    q[i] = qkv[src];
    k[i] = qkv[src + C];
    v[i] = qkv[src + 2 * C];
  }
};

template <typename floatX>
struct PermuteQkvBackward {
  floatX* dqkv;
  const floatX *dq, *dk, *dv;
  HeadLayout L;
  int C;
  __device__ void operator()(std::size_t i) const {
    const std::size_t dst = L.row_major(i, 3 * C);
    dqkv[dst] = dq[i];
    dqkv[dst + C] = dk[i];
    dqkv[dst + 2 * C] = dv[i];
  }
};

template <typename floatX>
struct Unpermute {
  floatX* out;
  const floatX* y;
  HeadLayout L;
  int C;
  __device__ void operator()(std::size_t i) const { out[L.row_major(i, C)] = y[i]; }
};

template <typename floatX>
struct UnpermuteBackward {
  floatX* dy;
  const floatX* dout;
  HeadLayout L;
  int C;
  __device__ void operator()(std::size_t i) const { dy[i] = dout[L.row_major(i, C)]; }
};

// Row `row` of the BNH*T rows: query position i = row % T attends to j <= i.
template <typename floatX>
__global__ void attention_softmax_forward_kernel(floatX* att, const floatX* preatt, float scale,
                                                 int rows, int T) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kSoftmaxRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp
  const int i = row % T;
  const floatX* x = preatt + static_cast<std::size_t>(row) * T;
  floatX* a = att + static_cast<std::size_t>(row) * T;
  float maxv = -INFINITY;
  for (int j = lane; j <= i; j += 32) maxv = fmaxf(maxv, scale * to_float(x[j]));
  maxv = warp_max(maxv);
  float sum = 0.f;
  for (int j = lane; j <= i; j += 32) sum += expf(scale * to_float(x[j]) - maxv);
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += 32)
    a[j] = from_float<floatX>(j <= i ? expf(scale * to_float(x[j]) - maxv) * inv : 0.f);
}

template <typename floatX>
__global__ void attention_softmax_backward_kernel(floatX* dpreatt, const floatX* datt,
                                                  const floatX* att, float scale, int rows, int T) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kSoftmaxRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int i = row % T;
  const std::size_t base = static_cast<std::size_t>(row) * T;
  float weighted = 0.f;  // sum_j att_ij datt_ij
  for (int j = lane; j <= i; j += 32)
    weighted += to_float(att[base + j]) * to_float(datt[base + j]);
  weighted = warp_sum(weighted);  // every lane has read its datt before any lane writes
  for (int j = lane; j < T; j += 32) {
    const float g =
        j <= i ? scale * to_float(att[base + j]) * (to_float(datt[base + j]) - weighted) : 0.f;
    dpreatt[base + j] = from_float<floatX>(g);
  }
}

// A GEMM over a causal matrix multiplies its masked zeros too, and 0 * NaN is NaN: a non-finite
// value in X would reach outputs the causal sum never touches. For every column d of X[r] holding
// a non-finite value, this recomputes that column of out[r] = P[r] X[r] (P^T X when transposed)
// over the causal terms only, as the CPU op sums them; finite columns (every column in training)
// cost one coalesced read of X. One thread per column d: no barrier. The finiteness test reads
// every row unconditionally (&=, not a short-circuiting &&), so the loads do not wait for each
// other's comparisons and can be in flight together.
template <typename floatX>
__global__ void attention_causal_fixup_kernel(floatX* out, const floatX* P, const floatX* X, bool transposed, int T,
                                              int hs) {
  const int r = blockIdx.x, d = threadIdx.x;
  if (d >= hs) return;
  const std::size_t base = static_cast<std::size_t>(r) * T * hs;
  const floatX* x = X + base + d;
  bool finite = true;
  for (int t = 0; t < T; ++t) finite &= is_finite(to_float(x[static_cast<std::size_t>(t) * hs]));
  if (finite) return;
  const floatX* p = P + static_cast<std::size_t>(r) * T * T;
  for (int o = 0; o < T; ++o) {
    float acc = 0.f;
    if (transposed)
      for (int i = o; i < T; ++i)
        acc += to_float(p[static_cast<std::size_t>(i) * T + o]) * to_float(x[static_cast<std::size_t>(i) * hs]);
    else
      for (int j = 0; j <= o; ++j)
        acc += to_float(p[static_cast<std::size_t>(o) * T + j]) * to_float(x[static_cast<std::size_t>(j) * hs]);
    out[base + static_cast<std::size_t>(o) * hs + d] = from_float<floatX>(acc);
  }
}

template <typename floatX>
void attention_causal_fixup(floatX* out, const floatX* P, const floatX* X, bool transposed, int BNH, int T, int hs,
                            cudaStream_t stream) {
  if (BNH <= 0 || T <= 0) return;
  PIPELANE_LAUNCH(attention_causal_fixup_kernel<floatX>, dim3(BNH), dim3(32 * ceil_div(hs, 32)), 0, stream, out, P,
                  X, transposed, T, hs);
}

template <typename floatX>
void attention_permute_qkv(floatX* q, floatX* k, floatX* v, const floatX* qkv, int B, int T, int C,
                           int NH, cudaStream_t stream) {
  for_each_element(PermuteQkv<floatX>{q, k, v, qkv, HeadLayout{NH, T, C / NH}, C},
                   static_cast<std::size_t>(B) * T * C, stream);
}
template <typename floatX>
void attention_permute_qkv_backward(floatX* dqkv, const floatX* dq, const floatX* dk,
                                    const floatX* dv, int B, int T, int C, int NH,
                                    cudaStream_t stream) {
  for_each_element(PermuteQkvBackward<floatX>{dqkv, dq, dk, dv, HeadLayout{NH, T, C / NH}, C},
                   static_cast<std::size_t>(B) * T * C, stream);
}
template <typename floatX>
void attention_unpermute(floatX* out, const floatX* y, int B, int T, int C, int NH,
                         cudaStream_t stream) {
  for_each_element(Unpermute<floatX>{out, y, HeadLayout{NH, T, C / NH}, C},
                   static_cast<std::size_t>(B) * T * C, stream);
}
template <typename floatX>
void attention_unpermute_backward(floatX* dy, const floatX* dout, int B, int T, int C, int NH,
                                  cudaStream_t stream) {
  for_each_element(UnpermuteBackward<floatX>{dy, dout, HeadLayout{NH, T, C / NH}, C},
                   static_cast<std::size_t>(B) * T * C, stream);
}

template <typename floatX>
void attention_softmax_forward(floatX* att, const floatX* preatt, float scale, int BNH, int T,
                               cudaStream_t stream) {
  const int rows = BNH * T;
  if (rows <= 0) return;
  PIPELANE_LAUNCH(attention_softmax_forward_kernel<floatX>,
                  dim3(ceil_div(rows, kSoftmaxRowsPerBlock)), dim3(32 * kSoftmaxRowsPerBlock), 0,
                  stream, att, preatt, scale, rows, T);
}
template <typename floatX>
void attention_softmax_backward(floatX* dpreatt, const floatX* datt, const floatX* att, float scale,
                                int BNH, int T, cudaStream_t stream) {
  const int rows = BNH * T;
  if (rows <= 0) return;
  PIPELANE_LAUNCH(attention_softmax_backward_kernel<floatX>,
                  dim3(ceil_div(rows, kSoftmaxRowsPerBlock)), dim3(32 * kSoftmaxRowsPerBlock), 0,
                  stream, dpreatt, datt, att, scale, rows, T);
}

}  // namespace pipelane::cuda
