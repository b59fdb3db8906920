#include "runtime/cuda/emu/emulated_backend.h"

#include "runtime/cuda/backend/gemm_engine.h"
#include "runtime/cuda/emu/emulated_stream.h"
#include "runtime/cuda/emu/gemm_interpreter.h"

namespace pipelane::cuda_emu {

namespace {

// cuBLASLt's stand-in: each GemmCall interpreted in double (rounded once to the storage type),
// in the stream's order.
class InterpretedGemm final : public cuda::GemmEngine {
 public:
  std::string name() const override { return "GEMM interpreter (emulated cuBLASLt)"; }
  void run(const cuda::GemmCall& g, void*, std::size_t, cudaStream_t stream) override {
    auto work = [g] { run_gemm(g); };
    if (stream)
      stream->submit(work);
    else
      work();
  }
};

}  // namespace

cuda::CudaBackendConfig emulated_backend_config() {
  cuda::CudaBackendConfig c;
  c.gemm_workspace_bytes = 4096;
  c.check_pointers = true;
  return c;
}

std::unique_ptr<cuda::CudaBackend> make_emulated_cuda_backend(const cuda::CudaBackendConfig& config) {
  return cuda::make_cuda_backend(config, std::make_unique<InterpretedGemm>());
}

}  // namespace pipelane::cuda_emu
