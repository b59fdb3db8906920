// Batch norm in training mode (Backend::batch_norm_*): the per-channel sums one thread per channel
// over the block's rows in order, in double (the CPU op's order: no atomics, no partition that
// depends on the grid); normalising and the input gradient one thread per element.
#pragma once
#include <cmath>

#include "runtime/cuda/cuda_ops_cnn.h"
#include "runtime/cuda/kernels/cnn_common.cuh"

namespace pipelane::cuda {

// Forward phases 0 (sum x) and 1 (sum (x - mean)^2, the mean from phase 0's sum first).
struct BatchNormSums {
  BatchNormTensors t;
  std::int64_t r0, r1;
  int phase;
  __device__ void operator()(std::size_t i) const {
    const int c = static_cast<int>(i), C = t.C;
    const double M = static_cast<double>(t.rows);
    double sum = r0 == 0 ? 0.0 : t.sum_a[c];
    if (phase == 0) {
      for (std::int64_t r = r0; r < r1; ++r) sum += t.x[r * C + c];
    } else {
      if (r0 == 0) t.mean[c] = static_cast<float>(t.sum_a[c] / M);
      const float mean = t.mean[c];
      for (std::int64_t r = r0; r < r1; ++r) {
        const double d = static_cast<double>(t.x[r * C + c]) - mean;
        sum += d * d;
      }
    }
    t.sum_a[c] = sum;
  }
};

struct BatchNormFinish {
  BatchNormTensors t;
  __device__ void operator()(std::size_t i) const {
    const int c = static_cast<int>(i);
    const double M = static_cast<double>(t.rows);
    t.rstd[c] = static_cast<float>(1.0 / sqrt(t.sum_a[c] / M + t.eps));
    t.var_unbiased[c] = static_cast<float>(M > 1 ? t.sum_a[c] / (M - 1) : 0.0);
  }
};

struct BatchNormNormalise {
  BatchNormTensors t;
  std::int64_t r0;
  __device__ void operator()(std::size_t i) const {
    const std::size_t at = static_cast<std::size_t>(r0) * t.C + i;
    const int c = static_cast<int>(at % static_cast<std::size_t>(t.C));
    t.y[at] = (t.x[at] - t.mean[c]) * t.rstd[c] * t.weight[c] + t.bias[c];
  }
};

// Backward phase 0: sum dy and sum dy * xhat (xhat in fp32, as the CPU op).
struct BatchNormGradSums {
  BatchNormTensors t;
  std::int64_t r0, r1;
  __device__ void operator()(std::size_t i) const {
    const int c = static_cast<int>(i), C = t.C;
    double sum_dy = r0 == 0 ? 0.0 : t.sum_a[c], sum_dy_xhat = r0 == 0 ? 0.0 : t.sum_b[c];
    const float mean = t.mean[c], rstd = t.rstd[c];
    for (std::int64_t r = r0; r < r1; ++r) {
      const double g = t.dy[r * C + c];
      const float xhat = (t.x[r * C + c] - mean) * rstd;
      sum_dy += g;
      sum_dy_xhat += g * static_cast<double>(xhat);
    }
    t.sum_a[c] = sum_dy;
    t.sum_b[c] = sum_dy_xhat;
  }
};

struct BatchNormParamGrads {
  BatchNormTensors t;
  __device__ void operator()(std::size_t i) const {
    const int c = static_cast<int>(i);
    t.dweight[c] += static_cast<float>(t.sum_b[c]);
    t.dbias[c] += static_cast<float>(t.sum_a[c]);
  }
};

struct BatchNormInputGrad {
  BatchNormTensors t;
  std::int64_t r0;
  __device__ void operator()(std::size_t i) const {
    const std::size_t at = static_cast<std::size_t>(r0) * t.C + i;
    const int c = static_cast<int>(at % static_cast<std::size_t>(t.C));
    const double M = static_cast<double>(t.rows);
    const float scale = t.weight[c] * t.rstd[c];
    const float mean_dy = static_cast<float>(t.sum_a[c] / M), mean_dy_xhat = static_cast<float>(t.sum_b[c] / M);
    const float xhat = (t.x[at] - t.mean[c]) * t.rstd[c];
    t.dx[at] += scale * (t.dy[at] - mean_dy - xhat * mean_dy_xhat);
  }
};

struct BatchNormStatistics {
  float* running_mean;
  float* running_var;
  const float* mean;
  const float* var_unbiased;
  float momentum;
  __device__ void operator()(std::size_t c) const {
    running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1 - momentum) * running_var[c] + momentum * var_unbiased[c];
  }
};

void batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, cudaStream_t stream) {
  if (phase < 2) {
    // Phase 1's first block reads phase 0's sums for the mean: a channel's thread does both.
    if (r1 > r0 || r0 == 0) cnn_for_each_channel("batch_norm_sums", BatchNormSums{t, r0, r1, phase}, t.C, stream);
    return;
  }
  if (r0 == 0) cnn_for_each_channel("batch_norm_finish", BatchNormFinish{t}, t.C, stream);
  if (r1 > r0)
    cnn_for_each("batch_norm_normalise", BatchNormNormalise{t, r0}, static_cast<std::size_t>(r1 - r0) * t.C, stream);
}

void batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, cudaStream_t stream) {
  if (phase == 0) {
    if (r1 > r0 || r0 == 0) cnn_for_each_channel("batch_norm_grad_sums", BatchNormGradSums{t, r0, r1}, t.C, stream);
    return;
  }
  if (r0 == 0) cnn_for_each_channel("batch_norm_param_grads", BatchNormParamGrads{t}, t.C, stream);
  if (r1 > r0)
    cnn_for_each("batch_norm_input_grad", BatchNormInputGrad{t, r0}, static_cast<std::size_t>(r1 - r0) * t.C, stream);
}

void batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                  const float* var_unbiased, int C, float momentum, cudaStream_t stream) {
  cnn_for_each_channel("batch_norm_update_statistics",
                       BatchNormStatistics{running_mean, running_var, mean, var_unbiased, momentum}, C, stream);
}

}  // namespace pipelane::cuda
