// The CNN lanes' elementwise ops and their classifier's loss and optimizer (moved from
// lanes/builtin/cnn/pointwise_layers.cpp, cross_entropy.cpp and cnn_trainer.cpp).
#include <cmath>

#include "runtime/cpu/cpu_ops_cnn.h"

namespace pipelane::cpu {
namespace {

// splitmix64's finaliser (lanes/builtin/cnn/cnn_random.h's mix64; Backend::dropout).
std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void relu_forward(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] > 0 ? x[i] : 0.0f;
}

void relu_backward(float* dx, const float* y, std::size_t n) {
  // The output is what is kept: positive exactly where the input was. A select, not a branch: the
  // signs are random, and a mispredicted branch per element made this loop 100x slower.
  for (std::size_t i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dx[i] : 0.0f;
}

void dropout(float* x, std::size_t n, std::uint64_t stream, std::uint64_t first, float p) {
  const float keep_scale = 1.0f / (1.0f - p);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(mix64(stream + first + i) >> 40) * 0x1p-24;
    x[i] = u < p ? 0.0f : x[i] * keep_scale;
  }
}

double classifier_cross_entropy(float* dlogits, const float* logits, const std::int32_t* labels, int n, int classes) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const float* row = logits + static_cast<std::int64_t>(i) * classes;
    double top = row[0];
    for (int k = 1; k < classes; ++k) top = std::fmax(top, static_cast<double>(row[k]));
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += std::exp(row[k] - top);
    const double log_sum = std::log(sum) + top;
    total += log_sum - row[labels[i]];
    float* d = dlogits + static_cast<std::int64_t>(i) * classes;
    for (int k = 0; k < classes; ++k)
      d[k] = static_cast<float>((std::exp(row[k] - log_sum) - (k == labels[i] ? 1.0 : 0.0)) / n);
  }
  return total / n;
}

void sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n, const SgdMomentumParams& h) {
  const float lr = h.lr, mu = h.momentum, wd = h.weight_decay;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = grad[i] + wd * param[i];
    momentum[i] = mu * momentum[i] + d;
    param[i] -= lr * momentum[i];
    grad[i] = 0;
  }
}

}  // namespace pipelane::cpu
