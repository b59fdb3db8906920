// The nvcc translation unit of the Llama family's own kernels (cuda_ops_llama.h), instantiated
// for fp32 and bf16 storage. Its own unit beside cuda_kernels.cu, so the GPT-2 kernels' unit is
// unchanged.
#include "runtime/cuda/cuda_ops_llama.h"
#include "runtime/cuda/kernels/attention_gqa.cuh"
#include "runtime/cuda/kernels/embedding.cuh"
#include "runtime/cuda/kernels/kv_attention.cuh"
#include "runtime/cuda/kernels/rmsnorm.cuh"
#include "runtime/cuda/kernels/rope.cuh"
#include "runtime/cuda/kernels/swiglu.cuh"

namespace pipelane::cuda {

#define PIPELANE_INSTANTIATE_LLAMA_OPS(X)                                                                        \
  template void rmsnorm_forward<X, X>(X*, float*, const X*, const X*, int, int, float, cudaStream_t);            \
  template void rmsnorm_backward_input<X>(X*, const X*, const X*, const X*, const float*, int, int, cudaStream_t); \
  template void rmsnorm_backward_params<X>(float*, const X*, const X*, const float*, int, int, float*,           \
                                           cudaStream_t);                                                         \
  template void rope_rotate<X>(X*, const float*, int, int, int, int, int, int, bool, cudaStream_t);              \
  template void swiglu_forward<X>(X*, const X*, const X*, std::size_t, cudaStream_t);                            \
  template void swiglu_backward<X>(X*, X*, const X*, const X*, const X*, std::size_t, cudaStream_t);             \
  template void attention_gqa_causal_fixup<X>(X*, const X*, const X*, bool, int, int, int, int, cudaStream_t);   \
  template void attention_kv_cache_forward_gqa<X>(X*, const X*, const X*, const X*, int, int, int, int, int,     \
                                                  cudaStream_t);                                                 \
  template void embedding_backward_tokens<X>(float*, const X*, const std::int32_t*, int, int, int, int, cudaStream_t);

PIPELANE_INSTANTIATE_LLAMA_OPS(float)
PIPELANE_INSTANTIATE_LLAMA_OPS(bf16)
// bf16 storage's norm output straight from fp32 inputs.
template void rmsnorm_forward<float, bf16>(bf16*, float*, const float*, const float*, int, int, float, cudaStream_t);

}  // namespace pipelane::cuda
