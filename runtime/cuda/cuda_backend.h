// The CUDA backend: every op of runtime/backend.h on one GPU, from the own kernels
// (cuda_ops.h) and GEMMs (plans/gemm_plan.h, run by a GemmEngine: cuBLASLt on a GPU, an
// interpreter in the emulated build). The same source builds twice: by the library
// (libpipelane_cuda_backend.so, against the CUDA runtime) and, for tests on machines without a
// GPU, by the host compiler against the kernel emulator and a fake of the CUDA runtime
// (emu/fake_cuda_runtime.h). See README.md in this folder for what each build proves.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/backend.h"

namespace pipelane::cuda {

class GemmEngine;
class AttentionEngine;

// [model] attention: strided-batched cuBLASLt GEMMs around own softmax kernels, saving the
// probabilities [B,NH,T,T] for backward; or cuDNN's fused (flash) attention graphs, saving only
// the softmax statistics [B,NH,T] (backend/cuda_backend_cudnn.cpp).
enum class AttentionImpl : std::uint8_t { Cublas, Cudnn };

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
  // F32, or BF16: the matmul family's GEMMs read bf16 copies of their fp32 operands and write
  // fp32 (runtime/backend.h; backend/cuda_backend_autocast.cpp). Anything else is refused.
  DType compute = DType::F32;
  AttentionImpl attention = AttentionImpl::Cublas;
};

// What the backend holds outside its arenas, for reports (gpu_check.sh, `pipelane devices`).
struct CudaBackendStats {
  std::uint64_t scratch_high_water = 0;  // bytes of op temporaries at most at once
  int lane_partition_sms = 0;            // SMs of the lanes' green context (0: none)
  int priority_least = 0, priority_greatest = 0;
  // GEMMs whose epilogue (bias, GeLU) the library had no algorithm for, run as separate kernels.
  std::uint64_t unfused_epilogues = 0;
};

// bf16 storage for the composed ops (fp32 arithmetic inside every kernel, fp32 GEMM accumulation;
// parameter gradients, optimizer state, losses and layernorm statistics fp32), the pieces of a
// mixed-precision step beyond the one-kernel ops, whose bf16 launchers are in cuda_ops.h. Not
// reachable through Backend, whose buffers are fp32: `[train] precision = bf16` is bf16 compute
// on fp32 storage instead (CudaBackendConfig::compute); bf16 storage needs the model and executor
// to carry dtypes (README.md says what remains). Tests check these against the CPU ops in the
// emulated build; gpu_check.sh on a GPU.
class CudaBf16Ops {
 public:
  using bf16 = __nv_bfloat16;
  virtual ~CudaBf16Ops() = default;
  virtual void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N, int C, int OC,
                              Stream& s) = 0;
  virtual void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* weight, int N, int C, int OC, Stream& s) = 0;
  virtual void attention_forward(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH, Stream& s) = 0;
  virtual void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int B, int T, int C,
                                  int NH, Stream& s) = 0;
  // scratch holds lm_head_scratch_floats(N, Vp) bf16 values.
  virtual double lm_head_cross_entropy(float* losses, bf16* dx, float* dwte, const bf16* x, const bf16* wte,
                                       const std::int32_t* targets, int N, int C, int V, int Vp, float grad_scale,
                                       bf16* scratch, Stream& s) = 0;
  // AdamW on the fp32 master weights, also writing their bf16 compute copy.
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWParams& h,
                            float grad_scale, bf16* param_copy, Stream& s) = 0;
};

class CudaBackend : public Backend {
 public:
  virtual CudaBf16Ops& bf16_ops() = 0;
  // Device arenas of the lanes' kind: reserved from a pool whose maxSize is `quota_bytes`
  // (cuda_memory.h, PoolMemory). A refused reservation is ArenaQuotaError.
  virtual std::unique_ptr<Arena> create_pool_arena(std::string name, std::size_t quota_bytes) = 0;
  virtual CudaBackendStats stats() const = 0;
};

// Throws std::runtime_error with one line when the device, the GEMM engine or the lane partition
// cannot be had. `attention` runs the cuDNN graphs; config.attention = Cudnn needs one.
std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendConfig& config,
                                               std::unique_ptr<GemmEngine> gemm,
                                               std::unique_ptr<AttentionEngine> attention);
std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendConfig& config,
                                               std::unique_ptr<GemmEngine> gemm);

}  // namespace pipelane::cuda
