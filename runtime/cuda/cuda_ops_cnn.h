// The CNN lanes' own kernels (issue 24; Backend's CNN family, runtime/backend.h has the
// semantics), as launchers named and ordered like the CPU ops of runtime/cpu/cpu_ops_cnn.h with
// the stream last. fp32 only (the lanes' buffers are fp32 whatever the compute precision).
// Convolutions are im2col + the backend's GEMM (cuBLASLt, or the interpreter in the emulated
// build); these kernels are the rest.
//
// No float atomics: a window op's input gradient is gathered, one thread per input element adding
// its contributions in ascending output row from the element's old value, which is the order of
// the CPU's sequential scatter, so the sums are bit-identical from run to run whatever the grid.
// Batch norm's per-channel sums run one thread per channel over the block's rows in order, in
// double, as the CPU op does. Definitions: kernels/cnn_*.cuh, compiled in cuda_kernels_cnn.cu.
#pragma once
#include <driver_types.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend.h"  // CnnWindow, BatchNormTensors, SgdMomentumParams

namespace pipelane::cuda {

// ---- kernels/cnn_conv.cuh ----
void cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                cudaStream_t stream);
void cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                cudaStream_t stream);

// ---- kernels/cnn_batch_norm.cuh ----
void batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, cudaStream_t stream);
void batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, cudaStream_t stream);
void batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                  const float* var_unbiased, int C, float momentum, cudaStream_t stream);

// ---- kernels/cnn_pooling.cuh ----
void max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g, std::int64_t r0,
                      std::int64_t r1, cudaStream_t stream);
void max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                       std::int64_t r0, std::int64_t r1, cudaStream_t stream);
void adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                               cudaStream_t stream);
void adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                std::int64_t r1, cudaStream_t stream);

// ---- kernels/cnn_pointwise.cuh ----
void relu_forward(float* x, std::size_t n, cudaStream_t stream);
void relu_backward(float* dx, const float* y, std::size_t n, cudaStream_t stream);
void dropout(float* x, std::size_t n, std::uint64_t key, std::uint64_t first, float p, cudaStream_t stream);

// ---- kernels/cnn_classifier.cuh: the classifier's loss and SGD with momentum ----
// loss (one device double) = the mean over rows; row_losses: n doubles of scratch.
void classifier_cross_entropy(double* loss, double* row_losses, float* dlogits, const float* logits,
                              const std::int32_t* labels, int n, int classes, cudaStream_t stream);
void sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n, const SgdMomentumParams& h,
                         cudaStream_t stream);

}  // namespace pipelane::cuda
