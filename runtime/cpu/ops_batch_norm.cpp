// Batch norm in training mode on NHWC rows, by phases over blocks of rows (moved from
// lanes/builtin/cnn/batch_norm_layer.cpp): sums in double in row order.
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_ops_cnn.h"

namespace pipelane::cpu {

void batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1) {
  const int C = t.C;
  const double M = static_cast<double>(t.rows);
  const float* x = t.x;
  double* sum_a = t.sum_a;
  if (phase == 0) {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) sum_a[c] = 0;
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) sum_a[c] += x[r * C + c];
  } else if (phase == 1) {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) {
        t.mean[c] = static_cast<float>(sum_a[c] / M);
        sum_a[c] = 0;
      }
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) {
        const double d = static_cast<double>(x[r * C + c]) - t.mean[c];
        sum_a[c] += d * d;
      }
  } else {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) {
        t.rstd[c] = static_cast<float>(1.0 / std::sqrt(sum_a[c] / M + t.eps));
        t.var_unbiased[c] = static_cast<float>(M > 1 ? sum_a[c] / (M - 1) : 0.0);
      }
    const float *gamma = t.weight, *beta = t.bias, *mean = t.mean, *rstd = t.rstd;
    float* y = t.y;
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - mean[c]) * rstd[c] * gamma[c] + beta[c];
  }
}

void batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1) {
  const int C = t.C;
  const float *x = t.x, *dy = t.dy, *mean = t.mean, *rstd = t.rstd;
  double *sum_a = t.sum_a, *sum_b = t.sum_b;
  if (phase == 0) {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) sum_a[c] = sum_b[c] = 0;
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) {
        const double g = dy[r * C + c], xhat = (x[r * C + c] - mean[c]) * rstd[c];
        sum_a[c] += g;
        sum_b[c] += g * xhat;
      }
    return;
  }
  const double M = static_cast<double>(t.rows);
  if (r0 == 0)
    for (int c = 0; c < C; ++c) {
      t.dweight[c] += static_cast<float>(sum_b[c]);
      t.dbias[c] += static_cast<float>(sum_a[c]);
    }
  // dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), per-channel factors first.
  std::vector<float> scale(C), mean_dy(C), mean_dy_xhat(C);
  for (int c = 0; c < C; ++c) {
    scale[c] = t.weight[c] * rstd[c];
    mean_dy[c] = static_cast<float>(sum_a[c] / M);
    mean_dy_xhat[c] = static_cast<float>(sum_b[c] / M);
  }
  float* dx = t.dx;
  for (std::int64_t r = r0; r < r1; ++r)
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[r * C + c] - mean[c]) * rstd[c];
      dx[r * C + c] += scale[c] * (dy[r * C + c] - mean_dy[c] - xhat * mean_dy_xhat[c]);
    }
}

void batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                  const float* var_unbiased, int C, float momentum) {
  // PyTorch: running = (1 - momentum) * running + momentum * batch.
  for (int c = 0; c < C; ++c) {
    running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1 - momentum) * running_var[c] + momentum * var_unbiased[c];
  }
}

}  // namespace pipelane::cpu
