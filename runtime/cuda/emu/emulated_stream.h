// What an emulated cudaStream_t points to: the CPU emulator's launches and the fake CUDA runtime
// (fake_cuda_runtime.cpp) hand work to a stream through this one interface, so a kernel launched
// on a stream runs in that stream's order with the copies, events and host functions around it.
// A null stream runs work at once on the calling thread (the kernel tests launch that way).
#pragma once

#if defined(__CUDACC__)
#error "emulated_stream.h is for host compilers"
#endif

#include <functional>

// driver_types.h declares `typedef struct CUstream_st* cudaStream_t;` and leaves the struct to
// the runtime: here the emulation defines it.
struct CUstream_st {
  virtual ~CUstream_st() = default;
  // Runs `work` after everything submitted before it: at once (immediate streams) or on the
  // stream's own thread (deferred streams). An exception thrown by deferred work becomes the
  // device's sticky error, reported by the next synchronising call.
  virtual void submit(std::function<void()> work) = 0;
};
