// Kernels with the bugs the sanitizer builds of the emulated kernels exist to catch, run under the
// emulator; ctest checks that the sanitizer reports each one (and nothing for the correct kernel):
//   clean            a shared-memory tree reduction with its __syncthreads (no report)
//   race             the same without the __syncthreads in the loop: ThreadSanitizer reports a
//                    data race (compute-sanitizer's racecheck on a GPU)
//   overflow-shared  a write one past a __shared__ array: AddressSanitizer's global-buffer-overflow
//   overflow-device  a write one past a device buffer: AddressSanitizer's heap-buffer-overflow
#include <cstdio>
#include <cstring>
#include <memory>

#include "runtime/cuda/kernels/launch.cuh"

namespace {

constexpr int kThreads = 64;

__global__ void reduce_kernel(int* out, bool synchronise) {
  __shared__ int s[kThreads];
  s[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    if (synchronise) __syncthreads();
  }
  if (threadIdx.x == 0) *out = s[0];
}

__global__ void shared_overflow_kernel(int* out) {
  __shared__ int s[kThreads];
  s[threadIdx.x + 1] = 1;  // thread kThreads-1 writes s[kThreads]
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void device_overflow_kernel(int* out, int n) {
  out[threadIdx.x + 1] = n;  // out has n == blockDim.x elements
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  int result = 0;
  if (!std::strcmp(mode, "clean") || !std::strcmp(mode, "race")) {
    PIPELANE_LAUNCH(reduce_kernel, dim3(2), dim3(kThreads), 0, nullptr, &result,
                    !std::strcmp(mode, "clean"));
    std::printf("sum %d (want %d)\n", result, kThreads * (kThreads - 1) / 2);
    return std::strcmp(mode, "clean") || result == kThreads * (kThreads - 1) / 2 ? 0 : 1;
  }
  if (!std::strcmp(mode, "overflow-shared")) {
    int out[kThreads];
    PIPELANE_LAUNCH(shared_overflow_kernel, dim3(1), dim3(kThreads), 0, nullptr, out);
    return 0;
  }
  if (!std::strcmp(mode, "overflow-device")) {
    auto out = std::make_unique<int[]>(kThreads);
    PIPELANE_LAUNCH(device_overflow_kernel, dim3(1), dim3(kThreads), 0, nullptr, out.get(),
                    kThreads);
    return 0;
  }
  std::fprintf(stderr, "usage: %s clean|race|overflow-shared|overflow-device\n", argv[0]);
  return 2;
}
