#include "runtime/cpu/bf16_gemm_choice.h"

#include <cstdlib>
#include <stdexcept>

#include "runtime/cpu/onednn_bf16_gemm.h"

namespace pipelane::cpu {

Bf16GemmChoice choose_bf16_gemm(CpuBf16Gemm requested) {
  constexpr const char* kVariable = "PIPELANE_CPU_BF16_GEMM";
  std::string source = requested == CpuBf16Gemm::Auto ? "auto" : "requested";
  if (requested == CpuBf16Gemm::Auto) {
    const char* env = std::getenv(kVariable);
    const std::string value = env ? env : "";
    if (!value.empty() && value != "auto") source = std::string(kVariable) + "=" + value;
    if (value == "onednn") requested = CpuBf16Gemm::Onednn;
    else if (value == "emulated") requested = CpuBf16Gemm::Emulated;
    else if (!value.empty() && value != "auto")
      throw std::invalid_argument(std::string(kVariable) + "='" + value + "': expected onednn, emulated or auto");
  }
  if (requested == CpuBf16Gemm::Emulated) return {false, "emulated GEMMs (bf16-rounded fp32 sgemm; " + source + ")"};
  const OnednnBf16Support s = probe_onednn_bf16();
  if (requested == CpuBf16Gemm::Onednn) {
    if (!s.matmul)
      throw std::runtime_error("cpu backend: oneDNN bf16 GEMMs (" + source + "): oneDNN has no bf16 matmul on this CPU (" +
                               s.isa + ")");
    // Without bf16 instructions oneDNN widens to fp32 inside its kernels: correct, slower than sgemm.
    return {true, "oneDNN bf16 GEMMs (" + s.isa + (s.native ? "" : ", no bf16 instructions: converted") + "; " +
                      source + ")"};
  }
  if (s.native && s.matmul) return {true, "oneDNN bf16 GEMMs (" + s.isa + "; auto)"};
  return {false, "emulated GEMMs (oneDNN's ISA here is " + s.isa + ", without bf16 dot products; auto)"};
}

}  // namespace pipelane::cpu
