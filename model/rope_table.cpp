#include "model/rope_table.h"

#include <cmath>

namespace pipelane {

std::vector<double> rope_inverse_frequencies(const GptConfig& cfg) {
  const int hs = cfg.head_size(), half = hs / 2;
  std::vector<double> f(static_cast<std::size_t>(half));
  const double pi = std::acos(-1.0);
  const RopeScaling& s = cfg.rope_scaling;
  for (int i = 0; i < half; ++i) {
    const double inv = std::pow(cfg.rope_theta, -2.0 * i / hs);
    f[i] = inv;
    if (!s.enabled()) continue;
    const double wavelen = 2 * pi / inv;
    const double low_wavelen = s.original_context / s.low_freq_factor;    // longer: scaled by 1/factor
    const double high_wavelen = s.original_context / s.high_freq_factor;  // shorter: kept
    if (wavelen > low_wavelen) {
      f[i] = inv / s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f[i] = (1 - smooth) * inv / s.factor + smooth * inv;
    }
  }
  return f;
}

std::vector<float> rope_table(const GptConfig& cfg, int positions) {
  const int hs = cfg.head_size(), half = hs / 2;
  const std::vector<double> f = rope_inverse_frequencies(cfg);
  std::vector<float> t(static_cast<std::size_t>(positions) * hs);
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < half; ++i) {
      const double angle = p * f[i];
      t[static_cast<std::size_t>(p) * hs + i] = static_cast<float>(std::cos(angle));
      t[static_cast<std::size_t>(p) * hs + half + i] = static_cast<float>(std::sin(angle));
    }
  return t;
}

}  // namespace pipelane
