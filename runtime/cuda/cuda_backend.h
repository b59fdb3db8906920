// The CUDA backend: every op of runtime/backend.h on one GPU, from the own kernels
// (cuda_ops.h) and GEMMs (plans/gemm_plan.h, run by a GemmEngine: cuBLASLt on a GPU, an
// interpreter in the emulated build). The same source builds twice: by the library
// (libpipelane_cuda_backend.so, against the CUDA runtime) and, for tests on machines without a
// GPU, by the host compiler against the kernel emulator and a fake of the CUDA runtime
// (emu/fake_cuda_runtime.h). See README.md in this folder for what each build proves.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/backend.h"

namespace pipelane::cuda {

class GemmEngine;

struct CudaBackendConfig {
  int device = 0;
  // cuBLASLt's workspace, one per stream (32 MiB suits Hopper).
  std::size_t gemm_workspace_bytes = std::size_t{32} << 20;
  // [lanes] sm_partition: lane (Low priority) streams run in a green context of this many SMs;
  // 0 = no partition. Creating the backend fails with one line when it cannot be had.
  int lane_sm_partition = 0;
  // Check that every float buffer an op is handed is device memory (cudaPointerGetAttributes per
  // pointer: the emulated build's tests turn it on; too slow for training on a GPU).
  bool check_pointers = false;
};

// What the backend holds outside its arenas, for reports (gpu_check.sh, `pipelane devices`).
struct CudaBackendStats {
  std::uint64_t scratch_high_water = 0;  // bytes of op temporaries at most at once
  int lane_partition_sms = 0;            // SMs of the lanes' green context (0: none)
  int priority_least = 0, priority_greatest = 0;
};

class CudaBackend : public Backend {
 public:
  // Device arenas of the lanes' kind: reserved from a pool whose maxSize is `quota_bytes`
  // (cuda_memory.h, PoolMemory). A refused reservation is ArenaQuotaError.
  virtual std::unique_ptr<Arena> create_pool_arena(std::string name, std::size_t quota_bytes) = 0;
  virtual CudaBackendStats stats() const = 0;
};

// Throws std::runtime_error with one line when the device, the GEMM engine or the lane partition
// cannot be had.
std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendConfig& config,
                                               std::unique_ptr<GemmEngine> gemm);

}  // namespace pipelane::cuda
