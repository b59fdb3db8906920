#include "lanes/builtin/cnn/batch_norm_layer.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {

BatchNormLayer::BatchNormLayer(std::string name, Feature* in, Feature* out, CnnParam* weight, CnnParam* bias,
                               CnnBuffer* running_mean, CnnBuffer* running_var)
    : name_(std::move(name)), in_(in), out_(out), weight_(weight), bias_(bias), running_mean_(running_mean),
      running_var_(running_var) {
  if (in->size() != out->size() || in->c != out->c || weight->size() != static_cast<std::size_t>(in->c))
    throw std::logic_error("BatchNormLayer " + name_ + ": shapes do not agree");
}

void BatchNormLayer::plan_buffers(BufferPlan& plan) {
  const std::size_t C = static_cast<std::size_t>(in_->c);
  plan.add(&sum_a_, C, "batch norm sums");
  plan.add(&sum_b_, C, "batch norm sums");
  plan.add(&mean_, C, "batch norm mean");
  plan.add(&rstd_, C, "batch norm rstd");
  plan.add(&var_unbiased_, C, "batch norm variance");
}

std::vector<LayerPhase> BatchNormLayer::forward_phases() const {
  const double row = kElementCost * in_->c;
  return {{in_->rows(), row}, {in_->rows(), row}, {in_->rows(), row}};
}

std::vector<LayerPhase> BatchNormLayer::backward_phases() const {
  const double row = kElementCost * in_->c;
  return {{in_->rows(), 2 * row}, {in_->rows(), 2 * row}};
}

void BatchNormLayer::forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  const int C = in_->c;
  const double M = static_cast<double>(in_->rows());
  const float* x = in_->value;
  if (phase == 0) {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) sum_a_[c] = 0;
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) sum_a_[c] += x[r * C + c];
  } else if (phase == 1) {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) {
        mean_[c] = static_cast<float>(sum_a_[c] / M);
        sum_a_[c] = 0;
      }
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) {
        const double d = static_cast<double>(x[r * C + c]) - mean_[c];
        sum_a_[c] += d * d;
      }
  } else {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) {
        rstd_[c] = static_cast<float>(1.0 / std::sqrt(sum_a_[c] / M + kBatchNormEps));
        var_unbiased_[c] = static_cast<float>(M > 1 ? sum_a_[c] / (M - 1) : 0.0);
      }
    const float *gamma = weight_->value, *beta = bias_->value;
    float* y = out_->value;
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - mean_[c]) * rstd_[c] * gamma[c] + beta[c];
  }
}

void BatchNormLayer::backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  const int C = in_->c;
  const float *x = in_->value, *dy = out_->grad;
  if (phase == 0) {
    if (r0 == 0)
      for (int c = 0; c < C; ++c) sum_a_[c] = sum_b_[c] = 0;
    for (std::int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < C; ++c) {
        const double g = dy[r * C + c], xhat = (x[r * C + c] - mean_[c]) * rstd_[c];
        sum_a_[c] += g;
        sum_b_[c] += g * xhat;
      }
    return;
  }
  const double M = static_cast<double>(in_->rows());
  if (r0 == 0)
    for (int c = 0; c < C; ++c) {
      weight_->grad[c] += static_cast<float>(sum_b_[c]);
      bias_->grad[c] += static_cast<float>(sum_a_[c]);
    }
  // dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), per-channel factors first.
  std::vector<float> scale(C), mean_dy(C), mean_dy_xhat(C);
  for (int c = 0; c < C; ++c) {
    scale[c] = weight_->value[c] * rstd_[c];
    mean_dy[c] = static_cast<float>(sum_a_[c] / M);
    mean_dy_xhat[c] = static_cast<float>(sum_b_[c] / M);
  }
  float* dx = in_->grad;
  for (std::int64_t r = r0; r < r1; ++r)
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[r * C + c] - mean_[c]) * rstd_[c];
      dx[r * C + c] += scale[c] * (dy[r * C + c] - mean_dy[c] - xhat * mean_dy_xhat[c]);
    }
}

void BatchNormLayer::update_statistics() {
  // PyTorch: running = (1 - momentum) * running + momentum * batch.
  for (int c = 0; c < in_->c; ++c) {
    running_mean_->value[c] = (1 - kBatchNormMomentum) * running_mean_->value[c] + kBatchNormMomentum * mean_[c];
    running_var_->value[c] =
        (1 - kBatchNormMomentum) * running_var_->value[c] + kBatchNormMomentum * var_unbiased_[c];
  }
}

std::vector<std::pair<float*, std::size_t>> BatchNormLayer::statistics_state() {
  const std::size_t C = static_cast<std::size_t>(in_->c);
  return {{mean_, C}, {var_unbiased_, C}};
}

}  // namespace pipelane::cnn
