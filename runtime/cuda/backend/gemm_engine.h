// Who runs the backend's GEMMs (plans/gemm_plan.h): cuBLASLt in the library, an interpreter of
// cuBLASLt's column-major semantics in the emulated build (emu/interpreted_gemm.h). Either way a
// call is enqueued on the stream and returns without waiting.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "runtime/cuda/plans/gemm_plan.h"

namespace pipelane::cuda {

class GemmEngine {
 public:
  virtual ~GemmEngine() = default;
  virtual std::string name() const = 0;
  // `workspace` belongs to `stream` (CudaStream's): no other stream uses it meanwhile. False,
  // with nothing enqueued, when the library has no algorithm for the call (cuBLASLt's heuristic
  // may find none for an epilogue on some shapes): the backend then runs the unfused ops.
  virtual bool run(const GemmCall& g, void* workspace, std::size_t workspace_bytes,
                   cudaStream_t stream) = 0;
};

}  // namespace pipelane::cuda
