// Grouped-query attention around cuBLASLt's GEMMs (plans/gqa_gemm_plan.h): the G = NH/KVH query
// heads of a kv head are adjacent in [B,NH,T,hs], so they form one [G*T, hs] operand and every
// product is a strided-batched GEMM over the B*KVH kv heads; K and V are never repeated. The
// permutes and the causal softmax are attention.cuh's; here the causal fix-up for grouped heads.
#pragma once
#include "runtime/cuda/cuda_ops_llama.h"
#include "runtime/cuda/kernels/attention.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

// One block per output block r, one thread per column d (no barrier). Not transposed: out[r] =
// P[r] X[r/G]; transposed: out[r] = sum_g P[r*G+g]^T X[r*G+g], the group's terms in g order, each
// over the causal rows i >= o. A column of X that is finite everywhere (every column in training)
// costs one coalesced read of X and changes nothing.
template <typename floatX>
__global__ void attention_gqa_causal_fixup_kernel(floatX* out, const floatX* P, const floatX* X, bool transposed,
                                                  int G, int T, int hs) {
  const int r = blockIdx.x, d = threadIdx.x;
  if (d >= hs) return;
  const std::size_t ths = static_cast<std::size_t>(T) * hs, tt = static_cast<std::size_t>(T) * T;
  const int sources = transposed ? G : 1;                  // X blocks this output reads
  const std::size_t x0 = transposed ? static_cast<std::size_t>(r) * G : static_cast<std::size_t>(r / G);
  bool finite = true;
  for (int g = 0; g < sources; ++g)
    for (int t = 0; t < T; ++t) finite = finite && is_finite(to_float(X[(x0 + g) * ths + static_cast<std::size_t>(t) * hs + d]));
  if (finite) return;
  for (int o = 0; o < T; ++o) {
    float acc = 0.f;
    if (transposed) {
      for (int g = 0; g < G; ++g) {
        const floatX* p = P + (x0 + g) * tt;
        const floatX* x = X + (x0 + g) * ths + d;
        for (int i = o; i < T; ++i)
          acc += to_float(p[static_cast<std::size_t>(i) * T + o]) * to_float(x[static_cast<std::size_t>(i) * hs]);
      }
    } else {
      const floatX* p = P + static_cast<std::size_t>(r) * tt;
      const floatX* x = X + x0 * ths + d;
      for (int j = 0; j <= o; ++j)
        acc += to_float(p[static_cast<std::size_t>(o) * T + j]) * to_float(x[static_cast<std::size_t>(j) * hs]);
    }
    out[static_cast<std::size_t>(r) * ths + static_cast<std::size_t>(o) * hs + d] = from_float<floatX>(acc);
  }
}

template <typename floatX>
void attention_gqa_causal_fixup(floatX* out, const floatX* P, const floatX* X, bool transposed, int heads, int G,
                                int T, int hs, cudaStream_t stream) {
  if (heads <= 0 || T <= 0) return;
  PIPELANE_LAUNCH(attention_gqa_causal_fixup_kernel<floatX>, dim3(heads), dim3(32 * ceil_div(hs, 32)), 0, stream,
                  out, P, X, transposed, G, T, hs);
}

}  // namespace pipelane::cuda
