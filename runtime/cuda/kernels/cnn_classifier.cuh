// The CNN lanes' classifier loss and optimizer (Backend::classifier_cross_entropy,
// sgd_momentum_update): cross-entropy one thread per row in double (log-sum-exp around the row's
// maximum), then one thread adds the rows' losses in order (the CPU op's sum); SGD with momentum
// one thread per element.
#pragma once
#include <cmath>

#include "runtime/cuda/cuda_ops_cnn.h"
#include "runtime/cuda/kernels/cnn_common.cuh"

namespace pipelane::cuda {

struct CrossEntropyRow {
  double* row_losses;
  float* dlogits;
  const float* logits;
  const std::int32_t* labels;
  int n, classes;
  __device__ void operator()(std::size_t i) const {
    const float* row = logits + i * static_cast<std::size_t>(classes);
    double top = row[0];
    for (int k = 1; k < classes; ++k) top = fmax(top, static_cast<double>(row[k]));
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += exp(row[k] - top);
    const double log_sum = log(sum) + top;
    const int label = labels[i];
    row_losses[i] = log_sum - row[label];
    float* d = dlogits + i * static_cast<std::size_t>(classes);
    for (int k = 0; k < classes; ++k) d[k] = static_cast<float>((exp(row[k] - log_sum) - (k == label ? 1.0 : 0.0)) / n);
  }
};

struct CrossEntropyMean {
  double* loss;
  const double* row_losses;
  int n;
  __device__ void operator()(std::size_t) const {
    double total = 0;
    for (int i = 0; i < n; ++i) total += row_losses[i];
    *loss = total / n;
  }
};

struct SgdMomentum {
  float* param;
  float* grad;
  float* momentum;
  SgdMomentumParams h;
  __device__ void operator()(std::size_t i) const {
    const float d = grad[i] + h.weight_decay * param[i];
    momentum[i] = h.momentum * momentum[i] + d;
    param[i] -= h.lr * momentum[i];
    grad[i] = 0.0f;
  }
};

void classifier_cross_entropy(double* loss, double* row_losses, float* dlogits, const float* logits,
                              const std::int32_t* labels, int n, int classes, cudaStream_t stream) {
  cnn_for_each("classifier_cross_entropy_rows", CrossEntropyRow{row_losses, dlogits, logits, labels, n, classes},
               static_cast<std::size_t>(n), stream);
  cnn_for_each("classifier_cross_entropy_mean", CrossEntropyMean{loss, row_losses, n}, 1, stream);
}

void sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n, const SgdMomentumParams& h,
                         cudaStream_t stream) {
  cnn_for_each("sgd_momentum_update", SgdMomentum{param, grad, momentum, h}, n, stream);
}

}  // namespace pipelane::cuda
