#include <cmath>

#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                  const AdamWParams& h, float grad_scale) {
  // Same order of operations as torch.optim.AdamW (single-tensor path) so that ten steps agree
  // with PyTorch to float rounding.
  const float bias1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.t));
  const float bias2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.t));
  const float step_size = h.lr / bias1;
  const float bias2_sqrt = std::sqrt(bias2);
  const float decay = 1.0f - h.lr * h.weight_decay;
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    param[i] *= decay;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bias2_sqrt + h.eps;
    param[i] -= step_size * (m[i] / denom);
  }
}

}  // namespace pipelane::cpu
