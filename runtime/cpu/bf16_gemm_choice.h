// Which GEMM path a bf16 CPU backend takes (cpu_backend.h's CpuBf16Gemm), decided once when the
// backend is made: the request, else $PIPELANE_CPU_BF16_GEMM, else whether oneDNN sees bf16 dot
// products on this CPU.
#pragma once
#include <string>

#include "runtime/cpu/cpu_backend.h"

namespace pipelane::cpu {

struct Bf16GemmChoice {
  bool onednn = false;
  std::string why;  // the path and what chose it, for the backend's name()
};

// std::invalid_argument for a value of the variable other than onednn, emulated, auto or empty;
// std::runtime_error when oneDNN is asked for and has no bf16 matmul on this CPU.
Bf16GemmChoice choose_bf16_gemm(CpuBf16Gemm requested);

}  // namespace pipelane::cpu
