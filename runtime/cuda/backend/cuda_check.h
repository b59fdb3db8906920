// One way to turn a CUDA runtime status into an exception: "CUDA: WHAT failed: NAME (TEXT)".
#pragma once
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace pipelane::cuda {

inline std::string cuda_error_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
}

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + " failed: " + cuda_error_text(status));
}

}  // namespace pipelane::cuda
