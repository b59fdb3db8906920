#include "lanes/builtin/cnn/cross_entropy.h"

#include <cmath>

namespace pipelane::cnn {

double cross_entropy(const float* logits, const std::int32_t* labels, int n, int classes, float* dlogits) {
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

}  // namespace pipelane::cnn
