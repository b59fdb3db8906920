// The CUDA backend's CNN ops (Backend's CNN family, runtime/backend.h): the kernels of
// kernels/cnn_*.cuh on the op's stream (a lane's Low stream). Convolutions are cnn_im2col + the
// backend's matmul (cuBLASLt) + cnn_col2im, composed by the lane. Only the loss waits: it returns
// a value.
#include <cuda_runtime_api.h>

#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/backend/cuda_check.h"
#include "runtime/cuda/cuda_ops_cnn.h"

namespace pipelane::cuda {

void CudaBackendImpl::cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                                 Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("cnn_im2col", {cols, in});
  cuda::cnn_im2col(cols, in, g, r0, r1, h);
}

void CudaBackendImpl::cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0,
                                 std::int64_t r1, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("cnn_col2im", {din, dcols});
  cuda::cnn_col2im(din, dcols, g, r0, r1, h);
}

void CudaBackendImpl::batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1,
                                         Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("batch_norm_forward", {t.x, phase == 2 ? t.y : nullptr, t.sum_a, t.mean, t.rstd, t.var_unbiased,
                                       phase == 2 ? t.weight : nullptr, phase == 2 ? t.bias : nullptr});
  cuda::batch_norm_forward(phase, t, r0, r1, h);
}

void CudaBackendImpl::batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1,
                                          Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("batch_norm_backward", {t.x, t.dy, t.sum_a, t.sum_b, t.mean, t.rstd, phase == 1 ? t.dx : nullptr,
                                        phase == 1 ? t.weight : nullptr, phase == 1 ? t.dweight : nullptr,
                                        phase == 1 ? t.dbias : nullptr});
  cuda::batch_norm_backward(phase, t, r0, r1, h);
}

void CudaBackendImpl::batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                                   const float* var_unbiased, int C, float momentum, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("batch_norm_update_statistics", {running_mean, running_var, mean, var_unbiased});
  cuda::batch_norm_update_statistics(running_mean, running_var, mean, var_unbiased, C, momentum, h);
}

void CudaBackendImpl::max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g,
                                       std::int64_t r0, std::int64_t r1, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("max_pool_forward", {out, argmax, in});
  cuda::max_pool_forward(out, argmax, in, g, r0, r1, h);
}

void CudaBackendImpl::max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                                        std::int64_t r0, std::int64_t r1, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("max_pool_backward", {din, dout, argmax});
  cuda::max_pool_backward(din, dout, argmax, g, r0, r1, h);
}

void CudaBackendImpl::adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0,
                                                std::int64_t r1, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("adaptive_avg_pool_forward", {out, in});
  cuda::adaptive_avg_pool_forward(out, in, g, r0, r1, h);
}

void CudaBackendImpl::adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                                 std::int64_t r1, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("adaptive_avg_pool_backward", {din, dout});
  cuda::adaptive_avg_pool_backward(din, dout, g, r0, r1, h);
}

void CudaBackendImpl::relu_forward(float* x, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("relu_forward", {x});
  cuda::relu_forward(x, n, h);
}

void CudaBackendImpl::relu_backward(float* dx, const float* y, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("relu_backward", {dx, y});
  cuda::relu_backward(dx, y, n, h);
}

void CudaBackendImpl::dropout(float* x, std::size_t n, std::uint64_t stream, std::uint64_t first, float p,
                              Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("dropout", {x});
  cuda::dropout(x, n, stream, first, p, h);
}

double CudaBackendImpl::classifier_cross_entropy(float* dlogits, const float* logits, const std::int32_t* labels,
                                                 int n, int classes, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("classifier_cross_entropy", {dlogits, logits});
  const DeviceInts device_labels(*scratch_, labels, static_cast<std::size_t>(n), h);
  const Temp<double> row_losses(*scratch_, static_cast<std::size_t>(n), h), loss(*scratch_, 1, h);
  cuda::classifier_cross_entropy(loss.get(), row_losses.get(), dlogits, logits, device_labels.get(), n, classes, h);
  double value = 0.0;
  check_cuda(cudaMemcpyAsync(&value, loss.get(), sizeof value, cudaMemcpyDeviceToHost, h),
             "cudaMemcpyAsync (the classifier's loss to the host)");
  check_cuda(cudaStreamSynchronize(h), "cudaStreamSynchronize");
  return value;
}

void CudaBackendImpl::sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n,
                                          const SgdMomentumParams& p, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("sgd_momentum_update", {param, grad, momentum});
  cuda::sgd_momentum_update(param, grad, momentum, n, p, h);
}

}  // namespace pipelane::cuda
