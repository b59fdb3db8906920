#include "lanes/builtin/cnn/cnn_init.h"

#include <cmath>
#include <string>

#include "lanes/builtin/cnn/cnn_random.h"

namespace pipelane::cnn {

float initial_value(const CnnParam& param, std::uint64_t seed, std::size_t i) {
  // Half-width of a uniform draw with standard deviation std: sqrt(3) * std.
  double bound = 0;
  switch (param.init) {
    case ParamInit::Ones: return 1.0f;
    case ParamInit::Zeros: return 0.0f;
    case ParamInit::ConvKaimingFanOut: bound = std::sqrt(3.0) * std::sqrt(2.0 / param.fan); break;
    case ParamInit::LinearDefault: bound = 1.0 / std::sqrt(static_cast<double>(param.fan)); break;
    case ParamInit::VggLinear: bound = std::sqrt(3.0) * 0.01; break;
  }
  return static_cast<float>(uniform_pm1(seed, name_key(param.name), i) * bound);
}

void initial_values(const CnnParam& param, std::uint64_t seed, float* host) {
  const std::size_t n = param.size();
  for (std::size_t i = 0; i < n; ++i) host[param.index_of_torch(i)] = initial_value(param, seed, i);
}

}  // namespace pipelane::cnn
