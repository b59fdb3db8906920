// What cuBLASLt is asked for grouped-query attention (runtime/backend.h's attention_*_gqa) on
// q [B,NH,T,hs] and k, v [B,KVH,T,hs] (the permutes of kernels/attention_gqa.cuh), G = NH/KVH.
// The G query heads of kv head (b, kh) are adjacent, so they are one row-major [G*T, hs] matrix
// and every product is one strided-batched GEMM over the B*KVH kv heads, with m or n = G*T:
// K and V are read in place, never repeated, and dk, dv sum their group inside the GEMM's k
// dimension. att and dpreatt are [B,NH,T,T], i.e. [G*T, T] per kv head. At G = 1 these are the
// MHA plans of gemm_plan.h. Pure functions: tests run them through the column-major interpreter.
#pragma once
#include <vector>

#include "runtime/cuda/plans/gemm_plan.h"

namespace pipelane::cuda {

struct GqaShape {
  int B, T, NH, KVH, hs;
  int group() const { return NH / KVH; }
};

// preatt[b,h] = q[b,h] @ k[b,h/G]^T (the 1/sqrt(hs) scale is the softmax kernel's).
GemmCall gqa_scores_gemm(void* preatt, const void* q, const void* k, const GqaShape& s, GemmTypes act);
// y[b,h] = att[b,h] @ v[b,h/G]
GemmCall gqa_values_gemm(void* y, const void* att, const void* v, const GqaShape& s, GemmTypes act);
// Backward of y = att @ v: datt = dy @ v^T, dv[b,kh] = sum_g att[b,kh*G+g]^T @ dy[b,kh*G+g] (=).
std::vector<GemmCall> gqa_values_backward_gemms(void* datt, void* dv, const void* dy, const void* att, const void* v,
                                                const GqaShape& s, GemmTypes act);
// Backward of preatt = q @ k^T: dq = dpreatt @ k, dk[b,kh] = sum_g dpreatt[b,kh*G+g]^T @ q[b,kh*G+g] (=).
std::vector<GemmCall> gqa_scores_backward_gemms(void* dq, void* dk, const void* dpreatt, const void* q,
                                                const void* k, const GqaShape& s, GemmTypes act);

}  // namespace pipelane::cuda
