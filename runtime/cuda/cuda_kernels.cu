// The nvcc translation unit of the own kernels: every kernels/*.cuh, instantiated for fp32 and
// bf16 storage (the declarations and their documentation are in cuda_ops.h).
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/attention.cuh"
#include "runtime/cuda/kernels/cross_entropy.cuh"
#include "runtime/cuda/kernels/elementwise.cuh"
#include "runtime/cuda/kernels/embedding.cuh"
#include "runtime/cuda/kernels/kv_attention.cuh"
#include "runtime/cuda/kernels/layernorm.cuh"
#include "runtime/cuda/kernels/optimizer.cuh"
#include "runtime/cuda/kernels/pagerank.cuh"

namespace pipelane::cuda {

#define PIPELANE_INSTANTIATE_OPS(X)                                                              \
  template void embedding_forward<X>(X*, const std::int32_t*, const X*, const X*, int, int, int,  \
                                     cudaStream_t);                                              \
  template void embedding_backward<X>(float*, float*, const X*, const std::int32_t*, int, int,    \
                                      int, cudaStream_t);                                        \
  template void embedding_lookup_local<X>(X*, const std::int32_t*, const X*, int, int, int, int,  \
                                          cudaStream_t);                                         \
  template void add_positions<X>(X*, const X*, int, int, int, cudaStream_t);                      \
  template void embedding_backward_local<X>(float*, float*, const X*, const std::int32_t*, int,   \
                                            int, int, int, int, cudaStream_t);                   \
  template void layernorm_forward<X, X>(X*, float*, float*, const X*, const X*, const X*, int,   \
                                        int, cudaStream_t);                                      \
  template void layernorm_backward<X>(X*, float*, float*, const X*, const X*, const X*,           \
                                      const float*, const float*, int, int, float*,              \
                                      cudaStream_t);                                             \
  template void layernorm_backward_input<X>(X*, const X*, const X*, const X*, const float*,       \
                                            const float*, int, int, cudaStream_t);               \
  template void layernorm_backward_params<X>(float*, float*, const X*, const X*, const float*,    \
                                             const float*, int, int, float*, cudaStream_t);      \
  template void gelu_forward<X>(X*, const X*, std::size_t, cudaStream_t);                         \
  template void gelu_backward<X>(X*, const X*, const X*, std::size_t, cudaStream_t);              \
  template void add_forward<X>(X*, const X*, const X*, std::size_t, cudaStream_t);                \
  template void add_inplace<X>(X*, const X*, std::size_t, cudaStream_t);                          \
  template void scale_inplace<X>(X*, float, std::size_t, cudaStream_t);                           \
  template void add_bias<X>(X*, const X*, int, int, cudaStream_t);                                \
  template void matmul_backward_bias<X>(float*, const X*, int, int, float*, cudaStream_t);        \
  template void attention_permute_qkv<X>(X*, X*, X*, const X*, int, int, int, int, cudaStream_t); \
  template void attention_permute_qkv_backward<X>(X*, const X*, const X*, const X*, int, int,     \
                                                  int, int, cudaStream_t);                       \
  template void attention_unpermute<X>(X*, const X*, int, int, int, int, cudaStream_t);           \
  template void attention_unpermute_backward<X>(X*, const X*, int, int, int, int, cudaStream_t);  \
  template void attention_softmax_forward<X>(X*, const X*, float, int, int, cudaStream_t);        \
  template void attention_softmax_backward<X>(X*, const X*, const X*, float, int, int,            \
                                              cudaStream_t);                                     \
  template void attention_causal_fixup<X>(X*, const X*, const X*, bool, int, int, int, cudaStream_t);          \
  template void attention_kv_cache_forward<X>(X*, const X*, int, const X*, const X*, int, int,    \
                                              int, int, int, cudaStream_t);                      \
  template void cross_entropy_chunk<X>(float*, X*, const std::int32_t*, int, int, int, float,     \
                                       bool, cudaStream_t);                                      \
  template void cross_entropy_chunk_row_max<X>(float*, const X*, int, int, int, cudaStream_t);    \
  template void cross_entropy_chunk_row_sums<X>(float*, float*, const X*, const float*,           \
                                                const std::int32_t*, int, int, int, int,         \
                                                cudaStream_t);                                   \
  template void cross_entropy_chunk_finish<X>(float*, X*, const float*, const float*,             \
                                              const float*, const std::int32_t*, int, int, int,  \
                                              int, float, bool, cudaStream_t);                   \
  template void adamw_update<X>(float*, const float*, float*, float*, std::size_t,                \
                                const AdamWParams&, float, X*, cudaStream_t);               \
  template void sum_squares<X>(double*, const X*, std::size_t, double*, cudaStream_t);

PIPELANE_INSTANTIATE_OPS(float)
PIPELANE_INSTANTIATE_OPS(bf16)
// bf16 storage's norm output straight from fp32 inputs.
template void layernorm_forward<float, bf16>(bf16*, float*, float*, const float*, const float*, const float*, int, int,
                                             cudaStream_t);
template void convert_from_float<bf16>(bf16*, const float*, std::size_t, cudaStream_t);
template void convert_to_float<bf16>(float*, const bf16*, std::size_t, cudaStream_t);
void round_to_bf16(float* x, std::size_t n, cudaStream_t stream) { for_each_element(RoundToBf16{x}, n, stream); }

// Not a storage-type op: the pagerank lane's step is fp32.
template void pagerank_step<float>(const PagerankStep&, cudaStream_t);

}  // namespace pipelane::cuda
