// Measured distributions as the simulator uses them: a list of equally likely values (a run's
// samples, or a quantile function read at evenly spaced probabilities), drawn from with a seeded
// generator, so a simulation is random like the machine it models and reproducible like a test.
#pragma once
#include <cstdint>
#include <vector>

namespace pipelane::sim {

// The samples, sorted; more than `limit` of them are summarised by `limit` equally likely values
// (the samples' quantiles at probabilities (k + 0.5) / limit).
std::vector<double> equally_likely(std::vector<double> samples, int limit = 256);

// Equally likely values of the distribution whose quantiles at evenly spaced probabilities 0, ...,
// 1 are given (e.g. a lane's fastest, 10%, ..., slowest step): the interpolated quantile function
// read at (k + 0.5) / count. One quantile: that one value.
std::vector<double> from_quantiles(const std::vector<double>& quantiles, int count = 100);

// One of the equally likely values, picked by u in [0, 1). Empty: 0.
double draw_from(const std::vector<double>& values, double u);
double median_of(const std::vector<double>& sorted_values);

// A seeded stream of uniform draws in [0, 1) (splitmix64: the same numbers on every machine).
class UniformDraws {
 public:
  explicit UniformDraws(std::uint64_t seed) : state_(seed) {}
  double next();

 private:
  std::uint64_t state_;
};

}  // namespace pipelane::sim
