// The entry points of the CUDA backend library (libpipelane_cuda_backend.so), which
// runtime/backend_registry.cpp loads with dlopen on demand. C linkage, so the registry finds them
// by name; the Backend they return is a C++ object built by the same compiler and headers (the
// library is part of the same build, never a third-party plugin): the registry still checks
// kCudaBackendAbiVersion, so a library left over from another build is refused with one line.
#pragma once
#include <cstddef>

namespace pipelane {

class Backend;
class DeviceComm;  // runtime/backend_registry.h

inline constexpr int kCudaBackendAbiVersion = 12;  // 5: attention = cudnn; 6: Backend::pagerank_step;
                                                   // 7: the Llama family's ops (Backend vtable);
                                                   // 8: Backend::sum_squares_each;
                                                   // 9: DeviceComm::reduce_scatter_sum;
                                                   // 10: the CNN lanes' ops (Backend vtable);
                                                   // 11: Backend::bfs_step, graphsgd_step
                                                   // 12: the bf16-storage casts (Backend vtable)

struct CudaBackendCreateOptions {
  int device_index = 0;
  int lane_sm_partition = 0;  // [lanes] sm_partition: SMs of the lanes' green context; 0 = none
  int compute_bf16 = 0;       // 1: bf16 GEMM operands, fp32 everything else (runtime/backend.h)
  int cudnn_attention = 0;    // 1: [model] attention = cudnn (cuDNN's fused attention graphs)
};

inline constexpr const char* kCudaBackendLibrary = "libpipelane_cuda_backend.so";
inline constexpr const char* kCudaBackendAbiVersionSymbol = "pipelane_cuda_backend_abi_version";
inline constexpr const char* kCudaBackendCreateSymbol = "pipelane_cuda_backend_create";
inline constexpr const char* kCudaBackendDevicesSymbol = "pipelane_cuda_backend_devices";
inline constexpr const char* kCudaCommUniqueIdSymbol = "pipelane_cuda_comm_unique_id";
inline constexpr const char* kCudaCommsCreateSymbol = "pipelane_cuda_comms_create";

// One communicator to create: `size` ranks, this process is `rank`, `id` (id_len bytes) is the
// unique id every member got from the same pipelane_cuda_comm_unique_id call.
struct CudaCommSpec {
  const char* id;
  std::size_t id_len;
  int size;
  int rank;
};

// The library's kCudaBackendAbiVersion.
using CudaBackendAbiVersionFn = int (*)();
// Returns a new Backend (the caller owns it), or null with a one-line reason in `error`.
using CudaBackendCreateFn = Backend* (*)(const CudaBackendCreateOptions* options, char* error,
                                         std::size_t error_len);
// Writes a new unique id (NCCL's, made without a device) into `id` and returns its length; -1
// with a one-line reason in `error`.
using CudaCommUniqueIdFn = int (*)(char* id, std::size_t id_len, char* error, std::size_t error_len);
// Creates `count` communicators on device `device`, all at once (one NCCL group, so neighbours
// creating theirs in another order cannot deadlock), into out[0 .. count). Returns 0, or -1 with
// a one-line reason in `error` and nothing created.
using CudaCommsCreateFn = int (*)(const CudaCommSpec* specs, int count, int device, DeviceComm** out, char* error,
                                  std::size_t error_len);
// Writes one line per visible device into `text` and returns how many; 0 or less with the reason
// (e.g. "no device (cudaGetDeviceCount: error 35 ...)") when none can be used.
using CudaBackendDevicesFn = int (*)(char* text, std::size_t text_len);

}  // namespace pipelane
