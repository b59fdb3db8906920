// A fake of the part of the CUDA runtime API the CUDA backend calls (fake_cuda_runtime.cpp
// defines those functions with the toolkit's own declarations from cuda_runtime_api.h), so the
// backend's source, built by g++ against the kernel emulator, runs on a machine without a GPU.
// It is a device in the sense that matters to the backend's logic:
// - memory: cudaMalloc / cudaHostAlloc / pool allocations are host memory registered by kind, so
//   cudaPointerGetAttributes tells device from pinned from pageable memory; copies and memsets
//   refuse ranges outside a live allocation (an out-of-bounds copy is an error, not a silent
//   write); new device memory is filled with 0xFF bytes (NaN), as uninitialised memory is garbage;
//   a device capacity makes cudaMalloc refuse, a pool's maxSize makes its allocations refuse;
// - streams: in-order queues. Deferred (the default) runs each stream's work on a thread of its
//   own, so a result read before its stream was synchronised, or work on one stream that was not
//   made to wait for another's, shows as a wrong value or a race (ThreadSanitizer); immediate
//   runs work at once on the caller's thread (for data planes that, like the test thread planes,
//   copy buffers on the host at call time). Copies from pageable memory take the source at the
//   call and copies into pageable memory wait for their stream, as the real runtime's do;
// - events complete when their stream reaches them and carry a host timestamp;
// - priorities: the range is [-5 (greatest), 0 (least)], out-of-range values are clamped;
// - no driver entry points: green contexts are unavailable, as on a driver without them.
// An exception thrown by deferred work (an emulated kernel's launch error) becomes the device's
// sticky error: the next synchronising call returns cudaErrorLaunchFailure, and the message is
// kept for last_error_message().
//
// What it is not: a model of speed, of concurrency between kernels (the emulator runs one grid at
// a time), or of cuBLASLt/cuDNN/NCCL (the GEMMs are interpreted elsewhere).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace pipelane::cuda_emu {

enum class StreamMode { Deferred, Immediate };

// The fake device is process-wide, as a CUDA context is. Streams take the mode in force when they
// are created.
void set_stream_mode(StreamMode mode);
StreamMode stream_mode();
// Device memory that cudaMalloc and pools may hold in all (default 4 GiB).
void set_device_capacity(std::size_t bytes);
std::size_t device_bytes_in_use();
// cudaStreamSynchronize calls so far (host waits on the hot path are what a GPU pays for).
std::uint64_t stream_synchronizations();
// The message behind the current sticky error ("" when none); clear_sticky_error() resets it
// (a real device would need a new process).
std::string last_error_message();
void clear_sticky_error();

}  // namespace pipelane::cuda_emu
