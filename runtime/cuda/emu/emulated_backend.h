// The CUDA backend built for the CPU: the same CudaBackend source (runtime/cuda/backend/) with the
// kernels run by the emulator, the CUDA runtime faked (fake_cuda_runtime.h) and the GEMMs run by
// the column-major interpreter instead of cuBLASLt. Tests register it as the backend
// "cuda-emulated" next to "cpu" (tests/runtime/test_backend_ops.cpp, tests/cuda/).
#pragma once
#include <functional>
#include <memory>

#include "runtime/cuda/backend/gemm_engine.h"
#include "runtime/cuda/cuda_backend.h"

namespace pipelane::cuda_emu {

// Pointer checks are on (every float buffer an op is handed must be device memory), GEMM
// workspaces are small (the interpreter needs none).
cuda::CudaBackendConfig emulated_backend_config();
std::unique_ptr<cuda::CudaBackend> make_emulated_cuda_backend(
    const cuda::CudaBackendConfig& config = emulated_backend_config());

// The GEMM interpreter as cuBLASLt's stand-in, for tests that check what the backend asks of it:
// `observe` sees every call before it runs; with `refuse_epilogues` every call with an epilogue
// finds no algorithm (as cuBLASLt's heuristic may on a GPU), so the backend's unfused fallbacks
// run.
struct InterpretedGemmOptions {
  bool refuse_epilogues = false;
  std::function<void(const cuda::GemmCall&)> observe;
};
std::unique_ptr<cuda::CudaBackend> make_emulated_cuda_backend(const cuda::CudaBackendConfig& config,
                                                              InterpretedGemmOptions gemm);

}  // namespace pipelane::cuda_emu
