#include "model/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace pipelane {

double LrSchedule::at(int step) const {
  if (step < warmup_steps) return peak * (step + 1) / warmup_steps;
  const int decay_steps = std::max(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / decay_steps);
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace pipelane
