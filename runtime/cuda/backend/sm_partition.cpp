#include "runtime/cuda/backend/sm_partition.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdexcept>

namespace pipelane::cuda {

namespace {

// The driver entry point `name` as of CUDA `version`, or an exception naming it.
template <typename Fn>
Fn entry_point(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {
    cudaGetLastError();
    throw std::runtime_error(std::string("[lanes] sm_partition: the driver has no ") + name + " (CUDA " +
                             std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) +
                             " green contexts): " +
                             (status != cudaSuccess ? cudaGetErrorString(status) : "entry point not found"));
  }
  return reinterpret_cast<Fn>(fn);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string("[lanes] sm_partition: ") + what + " failed (CUresult " +
                             std::to_string(static_cast<int>(r)) + ")");
}

class GreenContextPartition final : public SmPartition {
 public:
  GreenContextPartition(int device, int sms) {
    const auto device_get = entry_point<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
    const auto get_resource = entry_point<PFN_cuDeviceGetDevResource_v12040>("cuDeviceGetDevResource", 12040);
    const auto split = entry_point<PFN_cuDevSmResourceSplitByCount_v12040>("cuDevSmResourceSplitByCount", 12040);
    const auto generate = entry_point<PFN_cuDevResourceGenerateDesc_v12040>("cuDevResourceGenerateDesc", 12040);
    const auto create = entry_point<PFN_cuGreenCtxCreate_v12040>("cuGreenCtxCreate", 12040);
    destroy_ = entry_point<PFN_cuGreenCtxDestroy_v12040>("cuGreenCtxDestroy", 12040);
    stream_create_ = entry_point<PFN_cuGreenCtxStreamCreate_v12050>("cuGreenCtxStreamCreate", 12050);

    CUdevice dev = 0;
    check(device_get(&dev, device), "cuDeviceGet");
    CUdevResource all{};
    check(get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource(SM)");
    if (sms <= 0 || static_cast<unsigned>(sms) >= all.sm.smCount)
      throw std::runtime_error("[lanes] sm_partition = " + std::to_string(sms) + ": expected 1 .. " +
                               std::to_string(all.sm.smCount - 1) + " (the GPU has " +
                               std::to_string(all.sm.smCount) + " SMs)");
    // One group of at least `sms` SMs; the rest stays with the primary context (training).
    CUdevResource group{}, rest{};
    unsigned groups = 1;
    check(split(&group, &groups, &all, &rest, 0, static_cast<unsigned>(sms)), "cuDevSmResourceSplitByCount");
    if (groups < 1) throw std::runtime_error("[lanes] sm_partition: the driver made no SM group");
    CUdevResourceDesc desc{};
    check(generate(&desc, &group, 1), "cuDevResourceGenerateDesc");
    check(create(&ctx_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
    sm_count_ = static_cast<int>(group.sm.smCount);
  }
  ~GreenContextPartition() override {
    if (ctx_) destroy_(ctx_);
  }
  int sm_count() const override { return sm_count_; }
  cudaStream_t create_stream(int priority) override {
    CUstream s = nullptr;
    check(stream_create_(&s, ctx_, CU_STREAM_NON_BLOCKING, priority), "cuGreenCtxStreamCreate");
    return s;  // a CUstream is a cudaStream_t
  }

 private:
  PFN_cuGreenCtxDestroy_v12040 destroy_ = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 stream_create_ = nullptr;
  CUgreenCtx ctx_ = nullptr;
  int sm_count_ = 0;
};

}  // namespace

std::unique_ptr<SmPartition> SmPartition::create(int device, int sms) {
  return std::make_unique<GreenContextPartition>(device, sms);
}

}  // namespace pipelane::cuda
