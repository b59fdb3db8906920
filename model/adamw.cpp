#include "model/adamw.h"

namespace pipelane {

double grad_sum_squares(const ParamLayout& layout, const float* grads, Backend& backend,
                        Stream& stream) {
  double total = 0.0;
  for (const ParamEntry& e : layout.entries())
    total += backend.sum_squares(grads + e.offset, e.numel, stream);
  return total;
}

double grad_sum_squares_for_global_norm(const ParamLayout& layout, const float* grads,
                                        Backend& backend, Stream& stream) {
  double total = 0.0;
  for (const ParamEntry& e : layout.entries())
    if (e.sharded() || layout.tp().rank == 0)
      total += backend.sum_squares(grads + e.offset, e.numel, stream);
  return total;
}

float clip_scale(double grad_norm, float max_norm) {
  if (max_norm <= 0.f) return 1.0f;
  const float coef = max_norm / (static_cast<float>(grad_norm) + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

void adamw_step(const ParamLayout& layout, float* params, const float* grads, float* m, float* v,
                const AdamWConfig& cfg, float lr, int t, float grad_scale, Backend& backend,
                Stream& stream) {
  for (const ParamEntry& e : layout.entries()) {
    const AdamWParams h{lr, cfg.beta1, cfg.beta2, cfg.eps, e.decay ? cfg.weight_decay : 0.f, t};
    backend.adamw_update(params + e.offset, grads + e.offset, m + e.offset, v + e.offset, e.numel,
                         h, grad_scale, stream);
  }
}

}  // namespace pipelane
