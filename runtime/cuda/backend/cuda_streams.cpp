#include "runtime/cuda/backend/cuda_streams.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/cuda/backend/cuda_check.h"

namespace pipelane::cuda {

StreamPriorities stream_priorities(int least, int greatest) {
  // Communication one step below training when the range allows it (never past the least).
  return {greatest, std::min(greatest + 1, least), least};
}

CudaStream::CudaStream(cudaStream_t handle, StreamPriority priority, std::size_t workspace_bytes)
    : handle_(handle), priority_(priority), workspace_bytes_(workspace_bytes) {
  if (workspace_bytes_ > 0 && cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(handle_);
    throw std::runtime_error("CUDA backend: no device memory for a stream's " +
                             std::to_string(workspace_bytes_ >> 20) + " MiB GEMM workspace");
  }
}

CudaStream::~CudaStream() {
  cudaStreamSynchronize(handle_);
  if (workspace_) cudaFree(workspace_);
  cudaStreamDestroy(handle_);
}

void CudaStream::synchronize() { check_cuda(cudaStreamSynchronize(handle_), "cudaStreamSynchronize"); }

CudaStream& cuda_stream(Stream& s) {
  auto* c = dynamic_cast<CudaStream*>(&s);
  if (!c) throw std::logic_error("CUDA backend: handed a stream of another backend");
  return *c;
}

CudaEvent::CudaEvent() { check_cuda(cudaEventCreate(&handle_), "cudaEventCreate"); }
CudaEvent::~CudaEvent() { cudaEventDestroy(handle_); }

void CudaEvent::record(Stream& stream) {
  check_cuda(cudaEventRecord(handle_, cuda_stream(stream).handle()), "cudaEventRecord");
}
bool CudaEvent::query() const {
  const cudaError_t status = cudaEventQuery(handle_);
  if (status == cudaErrorNotReady) return false;
  check_cuda(status, "cudaEventQuery");
  return true;
}
void CudaEvent::synchronize() { check_cuda(cudaEventSynchronize(handle_), "cudaEventSynchronize"); }
void CudaEvent::wait_on(Stream& stream) {
  check_cuda(cudaStreamWaitEvent(cuda_stream(stream).handle(), handle_, 0), "cudaStreamWaitEvent");
}
double CudaEvent::elapsed_ms_since(const Event& earlier) const {
  const auto* e = dynamic_cast<const CudaEvent*>(&earlier);
  if (!e) throw std::logic_error("CudaEvent::elapsed_ms_since: the earlier event is not a CUDA event");
  float ms = 0.f;
  check_cuda(cudaEventElapsedTime(&ms, e->handle_, handle_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace pipelane::cuda
