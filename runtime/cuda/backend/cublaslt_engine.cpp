#include "runtime/cuda/backend/cublaslt_engine.h"

#include <string>

#include "runtime/cuda/libs/cublaslt.h"

namespace pipelane::cuda {

namespace {

class CublasLtEngine final : public GemmEngine {
 public:
  explicit CublasLtEngine(int sm_count_target) : sm_count_target_(sm_count_target) {}
  std::string name() const override {
    return "cuBLASLt " + std::to_string(cublasLtGetVersion()) +
           (sm_count_target_ > 0 ? " (" + std::to_string(sm_count_target_) + " SMs)" : "");
  }
  bool run(const GemmCall& g, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) override {
    return lt_.run(g, workspace, workspace_bytes, stream, sm_count_target_);
  }

 private:
  CublasLt lt_;
  int sm_count_target_;
};

}  // namespace

std::unique_ptr<GemmEngine> make_cublaslt_engine(int sm_count_target) {
  return std::make_unique<CublasLtEngine>(sm_count_target);
}

}  // namespace pipelane::cuda
