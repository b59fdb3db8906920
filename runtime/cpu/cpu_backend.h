// The CPU backend: OpenMP + OpenBLAS kernels (runtime/cpu/cpu_ops.h), oneDNN bf16 GEMMs in bf16
// compute on CPUs with bf16 dot products, flush-to-zero on.
#pragma once
#include <memory>
#include <string>

#include "runtime/backend.h"

namespace pipelane {

// A CPU backend whose kernels use `threads` OpenMP/OpenBLAS threads (0: all cores). The thread
// count belongs to this instance: each op sets it for its own duration on the calling thread and
// restores the caller's setting, so a second backend (a lane's, lane-bench's) never changes the
// trainer's threads. Creating it turns on flush-to-zero and denormals-are-zero on the calling
// thread and the OpenMP workers: denormals made a reference training run ten times slower.
// `compute` = BF16 is bf16 compute (runtime/backend.h): the matmul family's GEMM operands rounded
// to bf16, fp32 accumulation, on one of two GEMM paths (CpuBf16Gemm), chosen once when the
// backend is made and named in name(). Anything but F32 or BF16 is std::invalid_argument. An F32
// backend never touches oneDNN.
enum class CpuBf16Gemm {
  Auto,      // $PIPELANE_CPU_BF16_GEMM (onednn | emulated | auto) when set, else: oneDNN when the
             // CPU has bf16 dot products (AVX512-BF16 or AMX-BF16), emulated otherwise
  Onednn,    // oneDNN bf16 matmuls (runtime/cpu/onednn_bf16_gemm.h); std::runtime_error where
             // oneDNN has no bf16 matmul (CPUs without AVX-512)
  Emulated,  // bf16-rounded fp32 copies through the fp32 sgemm kernels: the reference, not fast
};
std::unique_ptr<Backend> make_cpu_backend(int threads = 0, DType compute = DType::F32,
                                          CpuBf16Gemm bf16_gemm = CpuBf16Gemm::Auto);

// The path a BF16 backend made with `requested` would take on this machine, and why, in words
// ("oneDNN bf16 GEMMs (avx512_core_bf16)", "emulated ..."): for `pipelane devices`.
// std::invalid_argument for a bad $PIPELANE_CPU_BF16_GEMM, as make_cpu_backend.
std::string describe_cpu_bf16_gemm(CpuBf16Gemm requested = CpuBf16Gemm::Auto);

// Sets FTZ/DAZ on the calling thread only (for threads the backend did not create).
void enable_flush_denormals_on_this_thread();
bool flush_denormals_enabled_on_this_thread();

}  // namespace pipelane
