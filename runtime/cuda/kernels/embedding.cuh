// Token + position embeddings, forward and backward, and the vocab-parallel pieces.
//
// The backward has no atomics and reproduces the CPU op's order of additions exactly:
// - dwpe[t,c] += dout[b,t,c] for b = 0, 1, ... (one thread per (t, c));
// - dwte[v,c]: the rows holding token v are summed in row order by ONE block, the one of the
//   token's first row (a block scans the rows before its own for the same token and leaves if it
//   finds one), starting from dwte's old value: ((dwte + d[r1]) + d[r2]) + ...
// On the GPU the scans cost O(N^2 / threads) token compares, a few microseconds for N = 8192.
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/elementwise.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kEmbeddingThreads = 128;

// Element i of a [B*T, C] tensor: its row, channel and position.
struct RowChannel {
  std::size_t n;
  int c, t;
  __device__ RowChannel(std::size_t i, int C, int T)
      : n(i / C), c(static_cast<int>(i % C)), t(static_cast<int>(i / C % T)) {}
};

template <typename floatX>
struct EmbeddingForward {
  floatX* out;
  const std::int32_t* tokens;
  const floatX* wte;
  const floatX* wpe;
  int T, C;
  __device__ void operator()(std::size_t i) const {
    const RowChannel e(i, C, T);
    out[i] = from_float<floatX>(to_float(wte[static_cast<std::size_t>(tokens[e.n]) * C + e.c]) +
                                to_float(wpe[static_cast<std::size_t>(e.t) * C + e.c]));
  }
};

template <typename floatX>
struct EmbeddingLookupLocal {
  floatX* out;
  const std::int32_t* tokens;
  const floatX* wte;
  int C, v0, vcount;
  __device__ void operator()(std::size_t i) const {
    const std::size_t n = i / C;
    const int c = static_cast<int>(i % C);
    const int local = tokens[n] - v0;
    out[i] = local >= 0 && local < vcount ? wte[static_cast<std::size_t>(local) * C + c]
                                          : from_float<floatX>(0.f);
  }
};

template <typename floatX>
struct AddPositions {
  floatX* out;
  const floatX* wpe;
  int T, C;
  __device__ void operator()(std::size_t i) const {
    const RowChannel e(i, C, T);
    out[i] = from_float<floatX>(to_float(out[i]) +
                                to_float(wpe[static_cast<std::size_t>(e.t) * C + e.c]));
  }
};

// dwpe[t,c] += sum over b in order of dout[b,t,c].
template <typename floatX>
struct PositionGrad {
  float* dwpe;
  const floatX* dout;
  int B, T, C;
  __device__ void operator()(std::size_t i) const {  // i = t * C + c
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += to_float(dout[static_cast<std::size_t>(b) * T * C + i]);
    dwpe[i] = acc;
  }
};

// Block n: if row n is the first row of its token (and the token is in [v0, v0 + vcount)), adds
// every row of that token, in row order, into dwte[token - v0, :].
template <typename floatX>
__global__ void token_grad_kernel(float* dwte, const floatX* dout, const std::int32_t* tokens,
                                  int N, int C, int v0, int vcount) {
  __shared__ int rows[kEmbeddingThreads];  // this chunk's rows of the token, in order
  __shared__ int warp_counts[kEmbeddingThreads / 32];
  const int n = blockIdx.x;
  const int token = tokens[n];
  const int local = token - v0;
  if (local < 0 || local >= vcount) return;  // uniform across the block
  // Is there an earlier row with the same token? Then that row's block does the work.
  int earlier = 0;
  for (int base = 0; base < n; base += blockDim.x) {
    const int m = base + threadIdx.x;
    earlier = __syncthreads_or(m < n && tokens[m] == token);
    if (earlier) break;  // uniform: every thread got the same answer
  }
  if (earlier) return;
  float* w = dwte + static_cast<std::size_t>(local) * C;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int base = n; base < N; base += blockDim.x) {
    // Ordered compaction of this chunk's matching rows into rows[].
    const int m = base + threadIdx.x;
    const bool match = m < N && tokens[m] == token;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, count = 0;
    for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) {
      if (k < warp) offset += warp_counts[k];
      count += warp_counts[k];
    }
    if (match) rows[offset + __popc(ballot & ((1u << lane) - 1u))] = m;
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = w[c];
      for (int k = 0; k < count; ++k)
        acc += to_float(dout[static_cast<std::size_t>(rows[k]) * C + c]);
      w[c] = acc;
    }
    // (The next chunk rewrites warp_counts[] and rows[] only after its first barrier.)
  }
}

template <typename floatX>
void embedding_forward(floatX* out, const std::int32_t* tokens, const floatX* wte,
                       const floatX* wpe, int B, int T, int C, cudaStream_t stream) {
  for_each_element(EmbeddingForward<floatX>{out, tokens, wte, wpe, T, C},
                   static_cast<std::size_t>(B) * T * C, stream);
}

template <typename floatX>
void embedding_lookup_local(floatX* out, const std::int32_t* tokens, const floatX* wte, int N,
                            int C, int v0, int vcount, cudaStream_t stream) {
  for_each_element(EmbeddingLookupLocal<floatX>{out, tokens, wte, C, v0, vcount},
                   static_cast<std::size_t>(N) * C, stream);
}

template <typename floatX>
void add_positions(floatX* out, const floatX* wpe, int B, int T, int C, cudaStream_t stream) {
  for_each_element(AddPositions<floatX>{out, wpe, T, C}, static_cast<std::size_t>(B) * T * C,
                   stream);
}

template <typename floatX>
void embedding_backward_local(float* dwte, float* dwpe, const floatX* dout,
                              const std::int32_t* tokens, int B, int T, int C, int v0, int vcount,
                              cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  for_each_element(PositionGrad<floatX>{dwpe, dout, B, T, C}, static_cast<std::size_t>(T) * C,
                   stream);
  PIPELANE_LAUNCH(token_grad_kernel<floatX>, dim3(B * T), dim3(kEmbeddingThreads), 0, stream, dwte,
                  dout, tokens, B * T, C, v0, vcount);
}

// The lookup's backward without positions (the Llama family): the token rows only.
template <typename floatX>
void embedding_backward_tokens(float* dwte, const floatX* dout, const std::int32_t* tokens, int N, int C, int v0,
                               int vcount, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  PIPELANE_LAUNCH(token_grad_kernel<floatX>, dim3(N), dim3(kEmbeddingThreads), 0, stream, dwte, dout, tokens, N, C,
                  v0, vcount);
}

template <typename floatX>
void embedding_backward(float* dwte, float* dwpe, const floatX* dout, const std::int32_t* tokens,
                        int B, int T, int C, cudaStream_t stream) {
  embedding_backward_local(dwte, dwpe, dout, tokens, B, T, C, 0, 0x7fffffff, stream);
}

}  // namespace pipelane::cuda
