// The Llama family's own kernels (issue 22), as launchers named and ordered like the CPU ops of
// runtime/cpu/cpu_ops.h with the stream last, templates over the storage type floatX (float or
// __nv_bfloat16; fp32 arithmetic inside), with cuda_ops.h's conventions: parameter gradients
// accumulate (+=), input gradients are overwritten except RMSNorm's dinp (a residual stream's
// gradient, like layernorm's); no float atomics, every sum over a partition fixed by the problem
// size (bit-identical from run to run).
//
// The GQA attention's products are cuBLASLt GEMMs (plans/gqa_gemm_plan.h); these kernels are the
// pieces around them. Definitions: kernels/rmsnorm.cuh, rope.cuh, swiglu.cuh, attention_gqa.cuh,
// kv_attention.cuh, embedding.cuh; instantiated in cuda_kernels_llama.cu.
#pragma once
#include <cuda_bf16.h>
#include <driver_types.h>

#include <cstddef>
#include <cstdint>

#include "runtime/cuda/cuda_ops.h"

namespace pipelane::cuda {

// ---- RMSNorm (kernels/rmsnorm.cuh): out = weight * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps) ----
// outX: the output's storage type, as layernorm_forward's.
template <typename floatX, typename outX = floatX>
void rmsnorm_forward(outX* out, float* rstd, const floatX* inp, const floatX* weight, int N, int C, float eps,
                     cudaStream_t stream);
// dinp (+=) = (w * dy - x * rstd^2 * mean(w * dy * x)) * rstd.
template <typename floatX>
void rmsnorm_backward_input(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight,
                            const float* rstd, int N, int C, cudaStream_t stream);
// dweight (+=) = sum_n x * rstd * dy: column sums over fixed chunks of rows (column_sums.cuh).
inline std::size_t rmsnorm_backward_scratch_floats(int N, int C) { return row_chunks(N) * C; }
template <typename floatX>
void rmsnorm_backward_params(float* dweight, const floatX* dout, const floatX* inp, const float* rstd, int N, int C,
                             float* scratch, cudaStream_t stream);

// ---- RoPE in place (kernels/rope.cuh), Hugging Face's rotate-half (runtime/backend.h) ----
// Row n = b*T + t of x (rows ld apart) is at position pos0 + t; the pair (i, i + hs/2) of each of
// its `heads` heads turns by table[p*hs + i] (cos), table[p*hs + hs/2 + i] (sin); `inverse` turns
// the other way (the backward: the transpose of the rotation).
template <typename floatX>
void rope_rotate(floatX* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld, bool inverse,
                 cudaStream_t stream);

// ---- SwiGLU's elementwise part (kernels/swiglu.cuh): out = silu(gate) * up ----
template <typename floatX>
void swiglu_forward(floatX* out, const floatX* gate, const floatX* up, std::size_t n, cudaStream_t stream);
// dgate, dup (=).
template <typename floatX>
void swiglu_backward(floatX* dgate, floatX* dup, const floatX* dout, const floatX* gate, const floatX* up,
                     std::size_t n, cudaStream_t stream);

// ---- grouped-query attention around the GEMMs (kernels/attention_gqa.cuh) ----
// x[B,T,H*hs] <-> heads[B,H,T,hs] (H = NH for q, KVH for k and v): attention_unpermute_backward
// and attention_unpermute of cuda_ops.h with C = H*hs do exactly this.
//
// The causal fix-up of cuda_ops.h's attention_causal_fixup for grouped heads (G = NH/KVH query
// heads per kv head, query head h reading kv head h/G): after out = P X over causal P [B*NH,T,T],
//  - not transposed: out [B*NH,T,hs] = P[r] X[r/G], X [B*KVH,T,hs] (the values, dq's keys);
//  - transposed: out [B*KVH,T,hs] = sum_g P[r*G+g]^T X[r*G+g], X [B*NH,T,hs] (dv, dk);
// every column of X with a NaN or Inf is recomputed over the causal terms only (the GEMM
// multiplies the masked zeros: 0 * NaN = NaN), so non-finite values land where the CPU op puts
// them. `heads` = B*NH (not transposed) or B*KVH (transposed) output blocks; hs <= 1024.
template <typename floatX>
void attention_gqa_causal_fixup(floatX* out, const floatX* P, const floatX* X, bool transposed, int heads, int G,
                                int T, int hs, cudaStream_t stream);

// ---- KV-cache attention with GQA (kernels/kv_attention.cuh) ----
// attention_kv_cache_forward with query head h reading cache head h / (NH/KVH): q and out rows
// NH*hs apart, cache rows KVH*hs apart. hs <= 256.
template <typename floatX>
void attention_kv_cache_forward_gqa(floatX* out, const floatX* q, const floatX* kcache, const floatX* vcache, int n,
                                    int p0, int NH, int KVH, int hs, cudaStream_t stream);

// ---- the token lookup's backward without positions (kernels/embedding.cuh) ----
// dwte rows of tokens in [v0, v0 + vcount) += their dout rows, in row order (embedding_backward's
// order of additions, without atomics).
template <typename floatX>
void embedding_backward_tokens(float* dwte, const floatX* dout, const std::int32_t* tokens, int N, int C, int v0,
                               int vcount, cudaStream_t stream);

}  // namespace pipelane::cuda
