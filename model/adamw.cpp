#include "model/adamw.h"

#include <vector>

namespace pipelane {

namespace {

// The entries' sums of squares from one call (one wait for the stream on a GPU), added in the
// layout's order: the same double as summing one sum_squares call per entry.
template <typename Counts>
double sum_of_entries(const ParamLayout& layout, const float* grads, Backend& backend, Stream& stream,
                      Counts counts) {
  std::vector<const float*> slices;
  std::vector<std::size_t> sizes;
  for (const ParamEntry& e : layout.entries())
    if (counts(e)) {
      slices.push_back(grads + e.offset);
      sizes.push_back(e.numel);
    }
  std::vector<double> sums(slices.size());
  backend.sum_squares_each(sums.data(), slices.data(), sizes.data(), slices.size(), stream);
  double total = 0.0;
  for (double s : sums) total += s;
  return total;
}

}  // namespace

double grad_sum_squares(const ParamLayout& layout, const float* grads, Backend& backend,
                        Stream& stream) {
  return sum_of_entries(layout, grads, backend, stream, [](const ParamEntry&) { return true; });
}

double grad_sum_squares_for_global_norm(const ParamLayout& layout, const float* grads,
                                        Backend& backend, Stream& stream) {
  const bool tp_rank0 = layout.tp().rank == 0;
  return sum_of_entries(layout, grads, backend, stream,
                        [tp_rank0](const ParamEntry& e) { return e.sharded() || tp_rank0; });
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
