// Proves the CUDA toolchain compiles and links into pipelane (through libcudart only, never
// libcuda). The CUDA backend proper comes with its own issue; until then this reports whether a
// device is usable, and says "no device" cleanly on a machine without a driver.
#include <cuda_runtime_api.h>

#include <string>

namespace pipelane {

__global__ void toolchain_probe_kernel(int* out) { *out = 42; }

std::string cuda_device_report() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no device (") + cudaGetErrorString(err) + ")";
  if (count == 0) return "no device";
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return std::to_string(count) + " device(s), first: " + prop.name;
}

}  // namespace pipelane
