// What every kernel file includes: the CUDA built-ins (from nvcc, or from the CPU emulator when a
// host compiler builds the same source for tests), one launch function for both, and the small
// device helpers the kernels share (fp32/bf16 loads and stores, warp and block reductions).
//
// Rules for kernels that must run on both (see emu/cuda_emulator.h): shared memory, warp
// shuffles/ballots with full masks, __syncthreads, integer atomics; block sizes a multiple of 32;
// every thread of a block reaches every __syncthreads (no early return before one); no inline PTX.
// Determinism: no float atomics; every reduction runs over a partition fixed by the problem size,
// never by the device, so results are bit-identical from run to run and with lanes on or off.
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define PIPELANE_EMULATED 0
#else
#include "runtime/cuda/emu/cuda_emulator.h"
#include "runtime/cuda/emu/emulated_stream.h"
#define PIPELANE_EMULATED 1
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

// Dynamic shared memory as a typed pointer: `PIPELANE_DYNAMIC_SHARED(float, buf);`.
#if PIPELANE_EMULATED
#define PIPELANE_DYNAMIC_SHARED(type, name) \
  type* name = reinterpret_cast<type*>(::pipelane::cuda_emu::dynamic_shared_memory())
#else
#define PIPELANE_DYNAMIC_SHARED(type, name)                               \
  extern __shared__ __align__(16) unsigned char pipelane_dynamic_smem_[]; \
  type* name = reinterpret_cast<type*>(pipelane_dynamic_smem_)
#endif

// Launches `kernel` (any __global__ function, template instances included) with the given
// configuration; arguments convert to the kernel's parameter types as with <<<>>>. Throws
// std::runtime_error naming the kernel when the launch is refused. Under nvcc this is
// kernel<<<grid, block, smem, stream>>>(args...); emulated, the grid runs in the stream's order
// (emu/emulated_stream.h), before returning when the stream is null.
#define PIPELANE_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::pipelane::cuda::launch(#kernel, kernel, grid, block, smem, stream, __VA_ARGS__)

namespace pipelane::cuda {

template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
#if PIPELANE_EMULATED
  // Converted once, as the launch would copy them into the parameter buffer; the grid runs in
  // the stream's order (a null stream: now, on this thread).
  std::tuple<std::decay_t<Params>...> params(static_cast<std::decay_t<Params>>(args)...);
  auto run = [name, kernel, grid, block, smem, params] {
    cuda_emu::run_grid(name, grid, block, smem, [&] { std::apply(kernel, params); });
  };
  if (stream)
    stream->submit(run);
  else
    run();
#else
  kernel<<<grid, block, smem, stream>>>(static_cast<Params>(std::forward<Args>(args))...);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA launch of ") + name +
                             " failed: " + cudaGetErrorString(err));
#endif
}

// Launch arithmetic on the host.
inline unsigned ceil_div(std::size_t a, std::size_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

// Blocks for a grid-stride loop over n elements: enough to fill any current GPU, never more than
// the elements need. A grid-stride loop computes the same values for any grid size, so the
// emulator, where every block costs a barrier over all its threads, runs it on a few blocks.
inline unsigned elementwise_blocks(std::size_t n, unsigned threads) {
  const std::size_t needed = (n + threads - 1) / threads;
  const std::size_t cap = PIPELANE_EMULATED ? 4 : 4096;
  return static_cast<unsigned>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

// ---- device helpers ----

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ bool is_finite(float x) {
#if PIPELANE_EMULATED
  return std::isfinite(x);
#else
  return isfinite(x);
#endif
}

// Butterfly reductions: every lane ends with the same value, summed in the same order on every
// lane and every run.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Block-wide reductions for blocks of up to 1024 threads (a multiple of 32). `scratch` is shared
// memory of 32 values; every thread of the block must call it (it synchronises), and gets the
// result. Safe to call repeatedly with the same scratch.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, T identity, Op warp_op) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_op(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  return warp_op(v);
}
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  return block_reduce(v, scratch, 0.0f, [](float x) { return warp_sum(x); });
}
__device__ __forceinline__ double block_sum(double v, double* scratch) {
  return block_reduce(v, scratch, 0.0, [](double x) { return warp_sum(x); });
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  return block_reduce(v, scratch, -INFINITY, [](float x) { return warp_max(x); });
}

}  // namespace pipelane::cuda
