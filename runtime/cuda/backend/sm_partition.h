// `[lanes] sm_partition = N`: lane streams confined to N SMs of the GPU through a green context
// (driver API, CUDA >= 12.4), so lane kernels cannot occupy the SMs training needs. The driver's
// entry points are reached through cudaGetDriverEntryPointByVersion: nothing links libcuda, and a
// driver without green contexts is a clean refusal naming the missing entry point.
//
// Unverified without a GPU (scripts/gpu_check.sh measures it): that runtime-API launches,
// cuBLASLt calls and events work on a green-context stream next to the primary context's
// streams; the split's rounding (Hopper hands out SMs in groups of 8).
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

namespace pipelane::cuda {

class SmPartition {
 public:
  // A green context of at least `sms` SMs of `device`, or std::runtime_error with one line.
  static std::unique_ptr<SmPartition> create(int device, int sms);
  virtual ~SmPartition() = default;
  virtual int sm_count() const = 0;  // as granted (rounded up by the driver)
  // A non-blocking stream whose kernels stay inside the partition.
  virtual cudaStream_t create_stream(int priority) = 0;
};

}  // namespace pipelane::cuda
