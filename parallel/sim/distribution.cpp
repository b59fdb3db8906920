#include "parallel/sim/distribution.h"

#include <algorithm>

namespace pipelane::sim {

namespace {

// The interpolated quantile function of ascending `q` (given at evenly spaced probabilities).
double quantile_at(const std::vector<double>& q, double u) {
  if (q.size() == 1) return q[0];
  const double pos = std::clamp(u, 0.0, 1.0) * (q.size() - 1);
  const std::size_t i = std::min(static_cast<std::size_t>(pos), q.size() - 2);
  return q[i] + (pos - i) * (q[i + 1] - q[i]);
}

}  // namespace

std::vector<double> equally_likely(std::vector<double> samples, int limit) {
  std::sort(samples.begin(), samples.end());
  if (limit < 1 || samples.size() <= static_cast<std::size_t>(limit)) return samples;
  return from_quantiles(samples, limit);
}

std::vector<double> from_quantiles(const std::vector<double>& quantiles, int count) {
  if (quantiles.size() <= 1) return quantiles;
  std::vector<double> values;
  for (int k = 0; k < count; ++k) values.push_back(quantile_at(quantiles, (k + 0.5) / count));
  return values;
}

double draw_from(const std::vector<double>& values, double u) {
  if (values.empty()) return 0.0;
  const auto i = static_cast<std::size_t>(std::clamp(u, 0.0, 1.0) * values.size());
  return values[std::min(i, values.size() - 1)];
}

double median_of(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double UniformDraws::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return ((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

}  // namespace pipelane::sim
