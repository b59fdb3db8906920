#include "runtime/cuda/backend/cudnn_attention_engine.h"

#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/cuda/libs/cudnn_graph.h"

namespace pipelane::cuda {

namespace {

std::string describe(const AttentionGraphKey& k) {
  return std::string(k.backward ? "backward" : "forward") + " graph, " + to_string(k.io) + ", B=" +
         std::to_string(k.B) + " T=" + std::to_string(k.T) + " C=" + std::to_string(k.C) +
         " NH=" + std::to_string(k.NH);
}

class CudnnAttentionEngine final : public AttentionEngine {
 public:
  std::string name() const override { return "cuDNN " + std::to_string(cudnnGetVersion()); }

  std::size_t prepare(const AttentionGraphKey& key) override {
    return static_cast<std::size_t>(plan(key).workspace_bytes());
  }

  void run(const AttentionGraphKey& key, const std::map<GraphBuffer, void*>& buffers, void* workspace,
           cudaStream_t stream) override {
    const CudnnPlan& p = plan(key);
    // One handle serves every stream: setting its stream and executing must not interleave.
    const std::lock_guard<std::mutex> lock(mutex_);
    p.run(cudnn_, buffers, workspace, stream);
  }

 private:
  const CudnnPlan& plan(const AttentionGraphKey& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    try {
      auto made = std::make_unique<CudnnPlan>(cudnn_, attention_graph(key));
      return *plans_.emplace(key, std::move(made)).first->second;
    } catch (const std::exception& e) {
      throw std::runtime_error("[model] attention = cudnn: " + std::string(e.what()) + " (" + describe(key) +
                               "); use [model] attention = cublas" +
                               (key.io == DataType::F32 ? " or [train] precision = bf16" : ""));
    }
  }

  Cudnn cudnn_;
  std::mutex mutex_;
  std::map<AttentionGraphKey, std::unique_ptr<CudnnPlan>> plans_;
};

}  // namespace

std::unique_ptr<AttentionEngine> make_cudnn_attention_engine() {
  return std::make_unique<CudnnAttentionEngine>();
}

}  // namespace pipelane::cuda
