// The attention kernels' q, k, v operands (ActivationIn: fp32, or bf16 storage's bf16 buffers) as
// the fp32 loops read them. fp32 compute: an fp32 buffer as it is; bf16 compute: its bf16 rounding,
// in a copy (as the kernels always made). A bf16 buffer is widened into the copy in either: it
// holds exactly the values the rounding would give, so the kernels see the same floats.
#pragma once
#include <cstddef>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

inline const float* attention_operand(ActivationIn x, std::size_t n, bool round, std::vector<float>& copy) {
  if (!x.is_bf16() && !round) return x.f32;
  copy.resize(n);
  if (x.is_bf16()) cast_from_bf16(copy.data(), x.bf16, n);
  else round_to_bf16(copy.data(), x.f32, n);
  return copy.data();
}

}  // namespace pipelane::cpu
