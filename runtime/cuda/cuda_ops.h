// The CUDA backend's own kernels, as launchers named and ordered like the CPU ops in
// runtime/ops.h, with the stream last. floatX is the storage type of activations and weights:
// float, or __nv_bfloat16 (bf16 storage, fp32 arithmetic inside every kernel). Statistics
// (layernorm mean/rstd), parameter gradients, optimizer state and losses are always fp32 (mixed
// precision keeps fp32 master weights and fp32 gradient accumulation, as Megatron does).
//
// Conventions are the CPU ops': parameter gradients accumulate (+=), input gradients are
// overwritten, except layernorm's dinp which accumulates. Pointers are device pointers. Launchers
// return once the work is enqueued on `stream` and throw std::runtime_error if a launch is refused.
// Ops that reduce over rows take a `scratch` buffer (size from the matching *_scratch_floats
// function) instead of using float atomics: every sum runs over a partition fixed by the problem
// size, so results are bit-identical from run to run and do not depend on the device.
//
// Matmuls and the attention's batched GEMMs are not here: they go through cuBLASLt (see
// plans/gemm_plan.h for what it is asked); these kernels are the pieces around them.
//
// Definitions: kernels/*.cuh (compiled by nvcc in cuda_kernels.cu, and by the host compiler
// against emu/cuda_emulator.h in tests), instantiated for float and __nv_bfloat16.
#pragma once
#include <cuda_bf16.h>
#include <driver_types.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend.h"  // AdamWParams

namespace pipelane::cuda {

using bf16 = __nv_bfloat16;

// Row reductions (parameter gradients) sum fixed chunks of this many rows, then the chunks.
constexpr int kRowsPerChunk = 32;
inline std::size_t row_chunks(int N) {
  return (static_cast<std::size_t>(N) + kRowsPerChunk - 1) / kRowsPerChunk;
}

// ---- embedding (kernels/embedding.cuh) ----
// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
template <typename floatX>
void embedding_forward(floatX* out, const std::int32_t* tokens, const floatX* wte,
                       const floatX* wpe, int B, int T, int C, cudaStream_t stream);
// dwte[tokens[n],:] += dout[n,:], dwpe[t,:] += sum_b dout[b,t,:]; each element's additions run in
// row order (as the CPU op's), without atomics.
template <typename floatX>
void embedding_backward(float* dwte, float* dwpe, const floatX* dout, const std::int32_t* tokens,
                        int B, int T, int C, cudaStream_t stream);
// Vocab-parallel pieces (the rank holds wte rows [v0, v0 + vcount)): out[n,:] = wte[tokens[n] -
// v0,:] for tokens it holds, 0 for the others.
template <typename floatX>
void embedding_lookup_local(floatX* out, const std::int32_t* tokens, const floatX* wte, int N,
                            int C, int v0, int vcount, cudaStream_t stream);
// out[b,t,:] += wpe[t,:]
template <typename floatX>
void add_positions(floatX* out, const floatX* wpe, int B, int T, int C, cudaStream_t stream);
// dwpe for every position, dwte only for the rank's rows.
template <typename floatX>
void embedding_backward_local(float* dwte, float* dwpe, const floatX* dout,
                              const std::int32_t* tokens, int B, int T, int C, int v0, int vcount,
                              cudaStream_t stream);

// ---- layernorm (kernels/layernorm.cuh), eps 1e-5 ----
// outX: the output's storage type (bf16 storage's bf16 output from fp32 inputs: <float, bf16>).
template <typename floatX, typename outX = floatX>
void layernorm_forward(outX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C, cudaStream_t stream);
inline std::size_t layernorm_backward_scratch_floats(int N, int C) { return 2 * row_chunks(N) * C; }
// dinp (+=), dweight (+=), dbias (+=).
template <typename floatX>
void layernorm_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t stream);
// The zero-bubble halves; layernorm_backward is exactly one then the other.
template <typename floatX>
void layernorm_backward_input(floatX* dinp, const floatX* dout, const floatX* inp,
                              const floatX* weight, const float* mean, const float* rstd, int N,
                              int C, cudaStream_t stream);
template <typename floatX>
void layernorm_backward_params(float* dweight, float* dbias, const floatX* dout, const floatX* inp,
                               const float* mean, const float* rstd, int N, int C, float* scratch,
                               cudaStream_t stream);

// ---- elementwise (kernels/elementwise.cuh) ----
template <typename floatX>
void gelu_forward(floatX* out, const floatX* inp, std::size_t n, cudaStream_t stream);  // tanh form
template <typename floatX>
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, std::size_t n,
                   cudaStream_t stream);
template <typename floatX>
void add_forward(floatX* out, const floatX* a, const floatX* b, std::size_t n, cudaStream_t stream);
template <typename floatX>
void add_inplace(floatX* acc, const floatX* x, std::size_t n, cudaStream_t stream);
template <typename floatX>
void scale_inplace(floatX* x, float s, std::size_t n, cudaStream_t stream);
// out[n,:] += bias[:] (the row-parallel bias, added after the all-reduce).
template <typename floatX>
void add_bias(floatX* out, const floatX* bias, int N, int C, cudaStream_t stream);
// dbias[:] += sum_n dout[n,:] (nn.Linear's bias gradient; the GEMMs are cuBLASLt's).
inline std::size_t matmul_backward_bias_scratch_floats(int N, int OC) { return row_chunks(N) * OC; }
// out[i] = in[i] in floatX (bf16: nearest even): the GEMM operands of bf16 compute on fp32
// storage (runtime/backend.h), made in op temporaries.
template <typename floatX>
void convert_from_float(floatX* out, const float* in, std::size_t n, cudaStream_t stream);
// out[i] = in[i] in fp32 (exact): a bf16 result of a cuDNN graph back to fp32 storage.
template <typename floatX>
void convert_to_float(float* out, const floatX* in, std::size_t n, cudaStream_t stream);
// x[i] = float(bf16(x[i])) (nearest even), in place: Backend::round_to_bf16.
void round_to_bf16(float* x, std::size_t n, cudaStream_t stream);
template <typename floatX>
void matmul_backward_bias(float* dbias, const floatX* dout, int N, int OC, float* scratch,
                          cudaStream_t stream);

// ---- attention around the batched GEMMs (kernels/attention.cuh) ----
// qkv[B,T,3C] ([q | k | v], heads contiguous) <-> q, k, v [B,NH,T,hs] for strided-batched GEMMs.
template <typename floatX>
void attention_permute_qkv(floatX* q, floatX* k, floatX* v, const floatX* qkv, int B, int T, int C,
                           int NH, cudaStream_t stream);
template <typename floatX>
void attention_permute_qkv_backward(floatX* dqkv, const floatX* dq, const floatX* dk,
                                    const floatX* dv, int B, int T, int C, int NH,
                                    cudaStream_t stream);  // dqkv (=)
// y[B,NH,T,hs] -> out[B,T,C] and back.
template <typename floatX>
void attention_unpermute(floatX* out, const floatX* y, int B, int T, int C, int NH,
                         cudaStream_t stream);
template <typename floatX>
void attention_unpermute_backward(floatX* dy, const floatX* dout, int B, int T, int C, int NH,
                                  cudaStream_t stream);
// att[r,i,j] = softmax_{j<=i}(scale * preatt[r,i,j]), 0 for j > i; r < BNH (= B*NH) rows of TxT.
template <typename floatX>
void attention_softmax_forward(floatX* att, const floatX* preatt, float scale, int BNH, int T,
                               cudaStream_t stream);
// dpreatt = scale * att * (datt - rowsum(att * datt)) on and below the diagonal, 0 above;
// dpreatt may alias datt.
template <typename floatX>
void attention_softmax_backward(floatX* dpreatt, const floatX* datt, const floatX* att, float scale,
                                int BNH, int T, cudaStream_t stream);

// After a GEMM out[r] = P[r] X[r] (or P[r]^T X[r] when `transposed`) over causal P[BNH,T,T]
// ([r,i,j] = 0 for j > i) and X, out[BNH,T,hs]: every column of X[r] with a NaN or Inf is
// recomputed over the causal terms only, so a non-finite value reaches exactly the outputs it
// reaches in the CPU op (the GEMM multiplies the masked zeros, and 0 * NaN = NaN). hs <= 1024.
template <typename floatX>
void attention_causal_fixup(floatX* out, const floatX* P, const floatX* X, bool transposed, int BNH, int T, int hs,
                            cudaStream_t stream);

// ---- KV-cache attention for inference (kernels/kv_attention.cuh) ----
// Queries at absolute positions p0 .. p0+n-1 attend causally over cache rows [0, position]:
// out[i, h*hs:(h+1)*hs] = softmax(q_i,h . K[0..p0+i],h / sqrt(hs)) V[0..p0+i],h.
// q rows are q_stride elements apart (3C when q is the q part of a fused qkv), cache rows
// kv_stride apart; out rows C apart. hs = C/NH <= 256. Any cache length (online softmax).
template <typename floatX>
void attention_kv_cache_forward(floatX* out, const floatX* q, int q_stride, const floatX* kcache,
                                const floatX* vcache, int kv_stride, int n, int p0, int C, int NH,
                                cudaStream_t stream);

// ---- softmax cross-entropy over a chunk of LM-head logits (kernels/cross_entropy.cuh) ----
// The fused head computes logits[rows, Vp] chunk by chunk with cuBLASLt; this does, per row, the
// max, sum of exp, loss and (when backward) dlogits IN PLACE over the chunk, for columns < V only:
// dlogits = grad_scale * (softmax - onehot(target)), 0 in the padding columns V..Vp-1.
template <typename floatX>
void cross_entropy_chunk(float* losses, floatX* logits, const std::int32_t* targets, int rows,
                         int V, int Vp, float grad_scale, bool backward, cudaStream_t stream);
// The vocab-parallel head's three steps around its two all-reduces (a rank holds columns
// [vocab_begin, vocab_begin + Vl); its first `valid` are real tokens): row max; then the row sum
// of exp(logit - max) and the target logit minus max (0 on ranks without the target); then losses
// and dlogits from the reduced sums.
template <typename floatX>
void cross_entropy_chunk_row_max(float* rowmax, const floatX* logits, int rows, int Vl, int valid,
                                 cudaStream_t stream);
template <typename floatX>
void cross_entropy_chunk_row_sums(float* rowsum, float* rowtgt, const floatX* logits,
                                  const float* rowmax, const std::int32_t* targets, int rows,
                                  int Vl, int valid, int vocab_begin, cudaStream_t stream);
template <typename floatX>
void cross_entropy_chunk_finish(float* losses, floatX* logits, const float* rowmax,
                                const float* rowsum, const float* rowtgt,
                                const std::int32_t* targets, int rows, int Vl, int valid,
                                int vocab_begin, float grad_scale, bool backward,
                                cudaStream_t stream);

// ---- optimizer and norms (kernels/optimizer.cuh) ----
// PyTorch's AdamW on fp32 master weights, same order of operations as cpu::adamw_update. When
// param_copy is non-null the updated weights are also written to it in floatX (the bf16 compute
// copy of mixed precision).
template <typename floatX>
void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                  const AdamWParams& h, float grad_scale, floatX* param_copy,
                  cudaStream_t stream);
inline void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                         const AdamWParams& h, float grad_scale, cudaStream_t stream) {
  adamw_update(param, grad, m, v, n, h, grad_scale, static_cast<float*>(nullptr), stream);
}
// *result (device) = sum of x[i]^2 in double: one partial per chunk of kSquaresChunk elements,
// then the partials.
constexpr std::size_t kSquaresChunk = std::size_t{1} << 16;
inline std::size_t sum_squares_scratch_doubles(std::size_t n) {
  return n == 0 ? 1 : (n + kSquaresChunk - 1) / kSquaresChunk;
}
template <typename floatX>
void sum_squares(double* result, const floatX* x, std::size_t n, double* scratch,
                 cudaStream_t stream);
// *result (device) = x[0] + x[1] + ... in double, in index order (one thread: the host loop's
// bits, for the LM head's loss sums of a few thousand rows).
void sum_in_order(double* result, const float* x, std::size_t n, cudaStream_t stream);

// ---- pagerank (kernels/pagerank.cuh): Backend::pagerank_step, fp32 ----
// One slice of a power iteration with the semantics of runtime/backend.h: a kernel of one thread
// per destination vertex (in-edges summed in CSR order, one fused multiply-add), then one block
// summing the slice over the fixed partition there and finishing the iteration in `state`. No
// atomics: the CPU backend's loop gives the same bits. A caller bounds the edges of a launch by its
// choice of [v_begin, v_end).
template <typename real>
void pagerank_step(const PagerankStep& step, cudaStream_t stream);

}  // namespace pipelane::cuda
