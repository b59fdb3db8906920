// The GemmEngine of the library: cuBLASLt (libs/cublaslt.h) on the stream's own workspace.
#pragma once
#include <memory>

#include "runtime/cuda/backend/gemm_engine.h"

namespace pipelane::cuda {

// Throws std::runtime_error (cublasLtCreate's status) when no usable device is present.
// sm_count_target > 0 plans every GEMM for that many SMs, leaving the rest to lanes.
std::unique_ptr<GemmEngine> make_cublaslt_engine(int sm_count_target = 0);

}  // namespace pipelane::cuda
