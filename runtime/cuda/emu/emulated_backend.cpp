#include "runtime/cuda/emu/emulated_backend.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/cuda/backend/attention_engine.h"
#include "runtime/cuda/backend/gemm_engine.h"
#include "runtime/cuda/emu/emulated_stream.h"
#include "runtime/cuda/emu/gemm_interpreter.h"
#include "runtime/cuda/emu/graph_interpreter.h"

namespace pipelane::cuda_emu {

namespace {

// cuBLASLt's stand-in: each GemmCall interpreted in double (rounded once to the storage type),
// in the stream's order.
class InterpretedGemm final : public cuda::GemmEngine {
 public:
  explicit InterpretedGemm(InterpretedGemmOptions options = {}) : options_(std::move(options)) {}
  std::string name() const override { return "GEMM interpreter (emulated cuBLASLt)"; }
  bool run(const cuda::GemmCall& g, void*, std::size_t, cudaStream_t stream) override {
    if (options_.observe) options_.observe(g);
    if (options_.refuse_epilogues && g.epilogue != cuda::Epilogue::None) return false;
    auto work = [g] { run_gemm(g); };
    if (stream)
      stream->submit(work);
    else
      work();
    return true;
  }

 private:
  InterpretedGemmOptions options_;
};

// cuDNN's stand-in: each attention graph interpreted (graph_interpreter.h), in the stream's order.
class InterpretedAttention final : public cuda::AttentionEngine {
 public:
  std::string name() const override { return "attention graph interpreter (emulated cuDNN)"; }
  std::size_t prepare(const cuda::AttentionGraphKey& key) override {
    graph(key);
    return 0;
  }
  void run(const cuda::AttentionGraphKey& key, const std::map<cuda::GraphBuffer, void*>& buffers, void*,
           cudaStream_t stream) override {
    const cuda::Graph& g = graph(key);  // lives as long as the engine
    auto work = [&g, buffers] { GraphInterpreter(g, buffers).run(); };
    if (stream)
      stream->submit(work);
    else
      work();
  }

 private:
  const cuda::Graph& graph(const cuda::AttentionGraphKey& key) {
    const std::lock_guard<std::mutex> lock(mutex_);  // lanes and training share the backend
    auto it = graphs_.find(key);
    if (it == graphs_.end()) it = graphs_.emplace(key, std::make_unique<cuda::Graph>(cuda::attention_graph(key))).first;
    return *it->second;
  }
  std::mutex mutex_;
  std::map<cuda::AttentionGraphKey, std::unique_ptr<cuda::Graph>> graphs_;
};

}  // namespace

cuda::CudaBackendConfig emulated_backend_config() {
  cuda::CudaBackendConfig c;
  c.gemm_workspace_bytes = 4096;
  c.check_pointers = true;
  return c;
}

std::unique_ptr<cuda::CudaBackend> make_emulated_cuda_backend(const cuda::CudaBackendConfig& config,
                                                              InterpretedGemmOptions gemm) {
  return cuda::make_cuda_backend(config, std::make_unique<InterpretedGemm>(std::move(gemm)),
                                 std::make_unique<InterpretedAttention>());
}

std::unique_ptr<cuda::CudaBackend> make_emulated_cuda_backend(const cuda::CudaBackendConfig& config) {
  return cuda::make_cuda_backend(config, std::make_unique<InterpretedGemm>(),
                                 std::make_unique<InterpretedAttention>());
}

}  // namespace pipelane::cuda_emu
