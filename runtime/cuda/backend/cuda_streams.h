// The CUDA backend's streams and events. Priorities come from cudaDeviceGetStreamPriorityRange,
// where a lower number is a higher priority and the default (0) is already the lowest: training
// compute gets the greatest, communication the next one, lanes the least. Priority only orders
// the dispatch of new blocks (it never preempts a running one), so lane kernels must stay short.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "runtime/backend.h"

namespace pipelane::cuda {

// The CUDA priority of each StreamPriority, from the device's range (least >= greatest).
struct StreamPriorities {
  int high, normal, low;
};
StreamPriorities stream_priorities(int least, int greatest);

class CudaStream final : public Stream {
 public:
  // Owns `handle` (destroyed with the stream) and a GEMM workspace of `workspace_bytes` device
  // bytes: cuBLASLt calls on one stream share it, calls on two streams never do.
  CudaStream(cudaStream_t handle, StreamPriority priority, std::size_t workspace_bytes);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  StreamPriority priority() const override { return priority_; }
  void synchronize() override;
  cudaStream_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  cudaStream_t handle_;
  StreamPriority priority_;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_;
};

// The stream behind a Stream& handed to the CUDA backend; std::logic_error for another backend's.
CudaStream& cuda_stream(Stream& s);

class CudaEvent final : public Event {
 public:
  CudaEvent();
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(Stream& stream) override;
  bool query() const override;
  void synchronize() override;
  void wait_on(Stream& stream) override;  // cudaStreamWaitEvent: no host wait
  double elapsed_ms_since(const Event& earlier) const override;
  cudaEvent_t handle() const { return handle_; }

 private:
  cudaEvent_t handle_ = nullptr;
};

}  // namespace pipelane::cuda
