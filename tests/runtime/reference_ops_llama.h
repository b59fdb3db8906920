// Naive double-precision references of the Llama family's ops, straight from their definitions
// (Hugging Face's LlamaRMSNorm, apply_rotary_pos_emb with rotate_half, LlamaMLP's SwiGLU, and
// attention with repeat_kv), sharing no code with runtime/cpu/.
#pragma once
#include <vector>

#include "tests/runtime/reference_ops.h"

namespace pipelane::ref {

// weight * x / sqrt(mean(x^2) + eps) per row; rstd (if non-null) gets [N].
Vec rmsnorm(const Vec& x, const Vec& weight, int N, int C, double eps, Vec* rstd = nullptr);
// x [B*T rows, ld apart]: heads x hs columns from 0 rotated, rotate-half; position pos0 + t;
// cos/sin from `table` (positions x hs: cos in the first half of a row, sin in the second).
// sign -1 rotates back (the transpose).
Vec rope(const Vec& x, const Vec& table, int B, int T, int pos0, int heads, int hs, int ld, double sign = 1);
// x * sigmoid(x) * up
Vec swiglu(const Vec& gate, const Vec& up);
// Causal attention of q [B,T,NH*hs] on k, v [B,T,KVH*hs] repeated per group (repeat_kv).
Vec attention_gqa(const Vec& q, const Vec& k, const Vec& v, int B, int T, int NH, int KVH, int hs);

}  // namespace pipelane::ref
