// The C entry points of libpipelane_cuda_backend.so (runtime/cuda_backend_abi.h).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/cuda/backend/cublaslt_engine.h"
#include "runtime/cuda/backend/cudnn_attention_engine.h"
#include "runtime/cuda/backend/nccl_comm.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda_backend_abi.h"

namespace {

void write_text(char* out, std::size_t len, const std::string& text) {
  if (!out || len == 0) return;
  std::snprintf(out, len, "%s", text.c_str());
}

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// "" when a device can be used, else why not.
std::string no_device_reason(int* count) {
  *count = 0;
  const cudaError_t status = cudaGetDeviceCount(count);  // leaves count untouched on error
  if (status != cudaSuccess) {
    cudaGetLastError();
    *count = 0;
    return std::string("no device (cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " +
           cudaGetErrorString(status) + ")";
  }
  return *count > 0 ? "" : "no device (cudaGetDeviceCount found none)";
}

std::string describe_device(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return "(properties unavailable)";
  }
  int least = 0, greatest = 0, driver = 0, runtime = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: %d SMs, %.1f GiB, sm_%d%d, stream priorities %d (greatest) .. %d (least); "
                "driver %s, runtime %s, cuBLASLt %zu, cuDNN %zu, NCCL %d",
                prop.name, prop.multiProcessorCount, prop.totalGlobalMem / double(1u << 30), prop.major,
                prop.minor, greatest, least, version_text(driver).c_str(), version_text(runtime).c_str(),
                cublasLtGetVersion(), cudnnGetVersion(), NCCL_VERSION_CODE);
  return line;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int pipelane_cuda_backend_abi_version() {
  return pipelane::kCudaBackendAbiVersion;
}

__attribute__((visibility("default"))) int pipelane_cuda_backend_devices(char* text, std::size_t text_len) {
  int count = 0;
  const std::string reason = no_device_reason(&count);
  if (!reason.empty()) {
    write_text(text, text_len, reason);
    return 0;
  }
  std::string lines;
  for (int i = 0; i < count; ++i) {
    if (i) lines += '\n';
    lines += describe_device(i);
  }
  write_text(text, text_len, lines);
  return count;
}

__attribute__((visibility("default"))) pipelane::Backend* pipelane_cuda_backend_create(
    const pipelane::CudaBackendCreateOptions* options, char* error, std::size_t error_len) {
  try {
    int count = 0;
    const std::string reason = no_device_reason(&count);
    if (!reason.empty()) {
      write_text(error, error_len, reason);
      return nullptr;
    }
    if (options->device_index < 0 || options->device_index >= count) {
      write_text(error, error_len,
                 "no device " + std::to_string(options->device_index) + " (" + std::to_string(count) +
                     " visible: cuda:0 .. cuda:" + std::to_string(count - 1) + ")");
      return nullptr;
    }
    pipelane::cuda::CudaBackendConfig config;
    config.device = options->device_index;
    config.lane_sm_partition = options->lane_sm_partition;
    config.compute = options->compute_bf16 ? pipelane::DType::BF16 : pipelane::DType::F32;
    config.attention = options->cudnn_attention ? pipelane::cuda::AttentionImpl::Cudnn : pipelane::cuda::AttentionImpl::Cublas;
    cudaSetDevice(config.device);
    return pipelane::cuda::make_cuda_backend(
               config, pipelane::cuda::make_cublaslt_engine(),
               options->cudnn_attention ? pipelane::cuda::make_cudnn_attention_engine() : nullptr)
        .release();
  } catch (const std::exception& e) {
    write_text(error, error_len, e.what());
  } catch (...) {
    write_text(error, error_len, "unknown error while creating the CUDA backend");
  }
  return nullptr;
}

__attribute__((visibility("default"))) int pipelane_cuda_comm_unique_id(char* id, std::size_t id_len, char* error,
                                                                         std::size_t error_len) {
  ncclUniqueId u;
  const ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) {
    write_text(error, error_len, std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
    return -1;
  }
  if (id_len < sizeof u.internal) {
    write_text(error, error_len, "no room for an NCCL unique id");
    return -1;
  }
  std::memcpy(id, u.internal, sizeof u.internal);
  return static_cast<int>(sizeof u.internal);
}

__attribute__((visibility("default"))) int pipelane_cuda_comms_create(const pipelane::CudaCommSpec* specs, int count,
                                                                       int device, pipelane::DeviceComm** out,
                                                                       char* error, std::size_t error_len) {
  try {
    std::vector<pipelane::cuda::NcclCommSpec> nccl;
    for (int i = 0; i < count; ++i) {
      pipelane::cuda::NcclCommSpec s{};
      if (specs[i].id_len != sizeof s.id.internal) throw std::invalid_argument("an NCCL unique id of the wrong size");
      std::memcpy(s.id.internal, specs[i].id, sizeof s.id.internal);
      s.size = specs[i].size;
      s.rank = specs[i].rank;
      nccl.push_back(s);
    }
    auto comms = pipelane::cuda::create_nccl_comms(nccl, device);
    for (int i = 0; i < count; ++i) out[i] = comms[i].release();
    return 0;
  } catch (const std::exception& e) {
    write_text(error, error_len, e.what());
  }
  return -1;
}

}  // extern "C"
