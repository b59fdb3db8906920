// The CUDA backend a test runs on: the real one (cuBLASLt, cuDNN) in test_cuda_gpu, built with
// PIPELANE_TEST_REAL_CUDA, or the emulated one (deferred streams) everywhere else. The same test
// source checks both.
#pragma once
#include <memory>

#include "runtime/cuda/cuda_backend.h"
#if PIPELANE_TEST_REAL_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda/backend/cublaslt_engine.h"
#include "runtime/cuda/backend/cudnn_attention_engine.h"
#else
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#endif

namespace pipelane::cuda_test {

// In `compute` precision with `attention`; null when the real backend finds no device.
inline std::unique_ptr<cuda::CudaBackend> cuda_backend_for_test(
    DType compute, cuda::AttentionImpl attention = cuda::AttentionImpl::Cublas) {
#if PIPELANE_TEST_REAL_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return nullptr;
  cuda::CudaBackendConfig config;
  config.compute = compute;
  config.attention = attention;
  return cuda::make_cuda_backend(
      config, cuda::make_cublaslt_engine(),
      attention == cuda::AttentionImpl::Cudnn ? cuda::make_cudnn_attention_engine() : nullptr);
#else
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  cuda::CudaBackendConfig config = cuda_emu::emulated_backend_config();
  config.compute = compute;
  config.attention = attention;
  return cuda_emu::make_emulated_cuda_backend(config);
#endif
}

}  // namespace pipelane::cuda_test
