// The CPU backend's kernels (private to runtime/cpu/: everything else calls them through
// Backend, runtime/backend.h). The op set a GPT needs, forward and backward, fp32, row-major,
// OpenMP-parallel, matmuls through OpenBLAS sgemm. N = rows (B*T), C = channels.
//
// Gradient conventions (llm.c style, chosen so gradient accumulation costs nothing):
// - parameter gradients (dw, db, dwte, ...) are ACCUMULATED (+=);
// - input gradients are OVERWRITTEN (=), except layernorm_backward's dinp, which accumulates
//   because a layernorm's input is always the residual stream, whose gradient is a sum.
// Every reduction of ours runs over a fixed partition, never an OpenMP `reduction` clause, so
// results are bit-identical from run to run, and our own loops give the same bits for any thread
// count. OpenBLAS's sgemm does not: it rounds differently with another thread count (measured:
// low bits of ~10% of elements), so compare runs at equal thread counts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/backend.h"

namespace pipelane::cpu {

using ::pipelane::AdamWParams;
using ::pipelane::GroupReduce;

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int B, int T, int C);
// The vocab-parallel embedding (see Backend): a lookup of this rank's rows (zeros elsewhere), the
// positions added after the all-reduce, and the backward restricted to this rank's rows.
void embedding_lookup_local(float* out, const std::int32_t* tokens, const float* wte, int N, int C,
                            int v0, int vcount);
void add_positions(float* out, const float* wpe, int B, int T, int C);
void embedding_backward_local(float* dwte, float* dwpe, const float* dout,
                              const std::int32_t* tokens, int B, int T, int C, int v0, int vcount);

// Layernorm over the last dimension, eps 1e-5 (PyTorch's default). mean/rstd are saved for backward.
void layernorm_forward(ActivationOut out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        ActivationIn inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);
// layernorm_backward split in two for the zero-bubble split backward (input gradient now, weight
// gradient later). Each runs exactly the corresponding loop of layernorm_backward, so the pair
// gives bit-identical results to it. dinp (+=, as above); dweight, dbias (+=).
void layernorm_backward_input(float* dinp, const float* dout, ActivationIn inp,
                              const float* weight, const float* mean, const float* rstd, int N,
                              int C);
void layernorm_backward_params(float* dweight, float* dbias, const float* dout, ActivationIn inp,
                               const float* mean, const float* rstd, int N, int C);

// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] (bias may be null): nn.Linear's layout.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);
// dinp (=, may be null), dweight (+=), dbias (+=, may be null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);
// dbias[OC] += the column sums of dout[N,OC] (matmul_backward's, over fixed column slices).
void matmul_backward_bias(float* dbias, const float* dout, int N, int OC);
// Only the input gradient: dinp (=), the same sgemm as matmul_backward's (bit-identical). The
// weight half is matmul_backward with dinp == null.
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C,
                           int OC);

// Causal multi-head attention on a fused qkv[B,T,3C] laid out [q | k | v], heads contiguous.
// att[B,NH,T,T] keeps the softmax probabilities for backward (zero above the diagonal), in fp32
// or bf16 (probability_rows.h).
void attention_forward(ActivationOut out, ActivationOut att, ActivationIn qkv, int B, int T, int C, int NH);
// dqkv (=).
void attention_backward(float* dqkv, const float* dout, ActivationIn qkv, ActivationIn att, int B, int T, int C,
                        int NH);
// KV-cache attention for inference (see Backend::attention_forward_kv).
void attention_forward_kv(float* out, float* scores, const float* qkv, float* k_cache,
                          float* v_cache, int past, int n, int C, int NH);

// Causal attention of n new positions against a KV cache (incremental decoding, chunked
// prefill). Query row i (at q + i * q_stride, heads contiguous: head h in columns [h*hs, (h+1)*hs),
// hs = C/NH) is position pos0 + i and attends to cache rows [0, pos0 + i]. kcache, vcache: [*, C]
// row-major with rows [0, pos0 + n) filled. out[n, C] (=). scores: scratch of n * NH * (pos0 + n)
// floats. Plain softmax with std::exp (not the training kernel's exp approximation), summed in
// position order: the same bits for any thread count and any chunking of the positions.
void attention_forward_kv(float* out, float* scores, const float* q, int q_stride, const float* kcache,
                          const float* vcache, int n, int pos0, int C, int NH);

// GeLU, tanh approximation.
void gelu_forward(ActivationOut out, const float* inp, std::size_t n);
void gelu_backward(float* dinp, ActivationIn inp, const float* dout, std::size_t n);  // dinp (=)

void add_forward(float* out, const float* a, const float* b, std::size_t n);  // out = a + b
void add_inplace(float* acc, const float* x, std::size_t n);                  // acc += x
void add_bias(float* out, const float* bias, int N, int C);                     // out[n,:] += bias

// logits[N,Vp] = x[N,C] @ wte[Vp,C]^T (the tied LM head, for inspection and inference).
void lm_head_logits(float* logits, const float* x, const float* wte, int N, int C, int Vp);

// Scratch rows the fused head uses per call for a given vocabulary: it never holds more than one
// [rows, Vp] logits block, so memory stays bounded whatever B*T is.
int lm_head_chunk_rows(int N, int Vp);

// The tied LM head fused with softmax cross-entropy. Columns >= V (vocab padding) are excluded from
// the softmax. Writes losses[N] (per position, nats). When dx is non-null it also runs backward for
// d(sum(losses) * grad_scale): dx (=) and dwte (+=). scratch holds lm_head_chunk_rows(N,Vp) * Vp
// floats. Returns the sum of losses in double precision.
double lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x,
                             const float* wte, const std::int32_t* targets, int N, int C, int V,
                             int Vp, float grad_scale, float* scratch);

// The vocab-parallel head (Megatron style), for a group of ranks that each hold a contiguous block
// of wte rows. The caller holds rows [vocab_begin, vocab_begin + vocab_count) of the padded table:
// `wte` and `dwte` point at those rows. Columns >= V are excluded from the softmax. The group's
// collectives come in as callbacks (the runtime knows no ranks): each reduces element-wise over the
// group in place; every rank calls them the same number of times with the same n, so every rank
// must use the same N and vocab_count. Per chunk of rows it computes the local logits, all-reduces
// the row max, then the row sum of exp and the target logit (one sum of 2*rows floats), and when dx
// is non-null runs backward for d(sum(losses) * grad_scale): dx (=) is all-reduced, dwte (+=) is
// local. losses[N] are the full losses on every rank; returns their sum (double). scratch holds
// lm_head_vocab_parallel_scratch_floats(N, vocab_count) floats.
std::size_t lm_head_vocab_parallel_scratch_floats(int N, int vocab_count);
double lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte, const float* x,
                                            const float* wte, const std::int32_t* targets, int N,
                                            int C, int V, int vocab_begin, int vocab_count,
                                            float grad_scale, float* scratch,
                                            const GroupReduce& reduce);

// Sum of squares in double, over fixed blocks so the result does not depend on the thread count.
double sum_squares(const float* x, std::size_t n);
void scale_inplace(float* x, float s, std::size_t n);
// bf16 storage (Backend::cast_to_bf16 / cast_from_bf16 / round_to_bf16; bf16_round.h's rounding).
void cast_to_bf16(std::uint16_t* out, const float* in, std::size_t n);
void cast_from_bf16(float* out, const std::uint16_t* in, std::size_t n);
void round_to_bf16_inplace(float* x, std::size_t n);

// One AdamW step on a tensor (PyTorch's AdamW: decoupled weight decay, bias correction).
// grad_scale multiplies the gradient first (global-norm clipping). t is the 1-based step.
void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                  const AdamWParams& h, float grad_scale);

// Best sustained fp32 sgemm throughput in GFLOP/s over `reps` n x n x n products: the peak that
// MFU is measured against.
double measure_sgemm_gflops(int n, int reps);

// dst[i] = src[i] rounded to bf16 (bf16_round.h); dst may be src.
void round_to_bf16(float* dst, const float* src, std::size_t n);

// The matmul family in bf16 compute mode (runtime/backend.h): the same ops, with every GEMM
// operand rounded to bf16 first (copies; the caller's buffers are not changed) and fp32
// accumulation, fp32 outputs. Biases and the bias gradient stay fp32 (a GEMM's epilogue and an
// fp32 column sum on a GPU); the attention's softmax and the head's cross-entropy run in fp32 on
// the fp32 GEMM outputs, and their results are rounded only where a GEMM reads them (the
// probabilities in att @ v and its backward, dpreatt, dlogits).
// The GEMM weights are GemmWeight (runtime/backend.h): an fp32 weight is rounded per call, a bf16
// one widened (exactly: the same values).
namespace bf16 {
// A GEMM weight's n values as the emulated GEMMs read them: fp32 rounded to bf16, or bf16 widened.
std::vector<float> gemm_weight_values(GemmWeight weight, std::size_t n);
void matmul_forward(float* out, ActivationIn inp, GemmWeight weight, const float* bias, int N,
                    int C, int OC);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, ActivationIn inp,
                     GemmWeight weight, int N, int C, int OC);
void matmul_backward_input(float* dinp, const float* dout, GemmWeight weight, int N, int C,
                           int OC);
void attention_forward(ActivationOut out, ActivationOut att, ActivationIn qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, const float* dout, ActivationIn qkv, ActivationIn att, int B, int T, int C,
                        int NH);
void lm_head_logits(float* logits, const float* x, GemmWeight wte, int N, int C, int Vp);
double lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x,
                             GemmWeight wte, const std::int32_t* targets, int N, int C, int V,
                             int Vp, float grad_scale, float* scratch);
double lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte, const float* x,
                                            GemmWeight wte, const std::int32_t* targets, int N,
                                            int C, int V, int vocab_begin, int vocab_count,
                                            float grad_scale, float* scratch,
                                            const GroupReduce& reduce);
}  // namespace bf16

// The same ops in bf16 compute mode on oneDNN's bf16 GEMMs (onednn_bf16_gemm.h), for a backend
// that chose that path: the same contracts and the same operand rounding as bf16:: above, with
// bf16 operands in the GEMMs themselves instead of rounded fp32 ones; the accumulation order is
// oneDNN's. Each holds the GEMM object's lock for its duration. The attention keeps bf16::'s
// kernels (its per-head products are loops of ours, not GEMM calls).
class OnednnBf16Gemm;
namespace onednn {
// A bf16 GemmWeight goes to oneDNN as it is (no conversion); an fp32 one is converted per call,
// into staging slot `slot` (weight_bits).
const std::uint16_t* weight_bits(OnednnBf16Gemm& g, int slot, GemmWeight w, std::size_t n);
void matmul_forward(OnednnBf16Gemm& g, float* out, ActivationIn inp, GemmWeight weight, const float* bias,
                    int N, int C, int OC);
void matmul_backward(OnednnBf16Gemm& g, float* dinp, float* dweight, float* dbias, const float* dout,
                     ActivationIn inp, GemmWeight weight, int N, int C, int OC);
void matmul_backward_input(OnednnBf16Gemm& g, float* dinp, const float* dout, GemmWeight weight, int N, int C,
                           int OC);
void lm_head_logits(OnednnBf16Gemm& g, float* logits, const float* x, GemmWeight wte, int N, int C, int Vp);
double lm_head_cross_entropy(OnednnBf16Gemm& g, float* losses, float* dx, float* dwte, const float* x,
                             GemmWeight wte, const std::int32_t* targets, int N, int C, int V, int Vp,
                             float grad_scale, float* scratch);
double lm_head_cross_entropy_vocab_parallel(OnednnBf16Gemm& g, float* losses, float* dx, float* dwte,
                                            const float* x, GemmWeight wte, const std::int32_t* targets, int N,
                                            int C, int V, int vocab_begin, int vocab_count, float grad_scale,
                                            float* scratch, const GroupReduce& reduce);
}  // namespace onednn

// PageRank's bounded step: Backend::pagerank_step (runtime/backend.h), synchronously.
void pagerank_step(const PagerankStep& step);
// The graph lanes' bounded steps: Backend::bfs_step and graphsgd_step (ops_graph.cpp), synchronously.
void bfs_step(const BfsStep& step);
void graphsgd_step(const GraphSgdStep& step);

// ---- The Llama family (runtime/backend.h has the contracts) ----
// RMSNorm: out = weight * (x * rstd); backward: dinp (+=), dweight (+=).
void rmsnorm_forward(ActivationOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
void rmsnorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight,
                            const float* rstd, int N, int C);
void rmsnorm_backward_params(float* dweight, const float* dout, ActivationIn inp, const float* rstd, int N, int C);
// RoPE in place (rotate-half), forward and its transpose.
void rope_forward(float* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld);
void rope_backward(float* dx, const float* table, int B, int T, int pos0, int heads, int hs, int ld);
// out = silu(gate) * up; dgate, dup (=).
void swiglu_forward(ActivationOut out, const float* gate, const float* up, std::size_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, ActivationIn gate, ActivationIn up,
                     std::size_t n);
// Grouped-query causal attention on separate q, k, v; dq, dk, dv (=).
void attention_forward_gqa(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k, ActivationIn v,
                           int B, int T, int NH, int KVH, int hs);
void attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q, ActivationIn k,
                            ActivationIn v, ActivationIn att, int B, int T, int NH, int KVH, int hs);
void attention_forward_kv_gqa(float* out, float* scores, const float* q, const float* k, const float* v,
                              float* k_cache, float* v_cache, int past, int n, int NH, int KVH, int hs);
// The lookup's backward without positions: dwte (+=) for tokens in [v0, v0 + vcount).
void embedding_backward_tokens(float* dwte, const float* dout, const std::int32_t* tokens, int N, int C, int v0,
                               int vcount);
namespace bf16 {
void attention_forward_gqa(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k, ActivationIn v,
                           int B, int T, int NH, int KVH, int hs);
void attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q, ActivationIn k,
                            ActivationIn v, ActivationIn att, int B, int T, int NH, int KVH, int hs);
}  // namespace bf16

}  // namespace pipelane::cpu
