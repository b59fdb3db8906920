#include "trainer/run/step_guard.h"

#include <cmath>

namespace pipelane {

const char* verdict_name(StepVerdict v) {
  switch (v) {
    case StepVerdict::Apply: return "applied";
    case StepVerdict::SkipNonFinite: return "nonfinite";
    case StepVerdict::SkipSpike: return "spike";
  }
  return "?";
}

StepVerdict StepGuard::judge(double loss, double grad_norm) {
  StepGuardState& s = state;
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    ++s.consecutive_bad;
    ++s.skipped_nonfinite;
    return StepVerdict::SkipNonFinite;
  }
  if (o_.spike_zscore > 0 && s.loss_count >= o_.spike_warmup && s.loss_var > 0) {
    const double z = (loss - s.loss_mean) / std::sqrt(s.loss_var);
    if (z > o_.spike_zscore) {
      ++s.consecutive_bad;
      ++s.skipped_spike;
      return StepVerdict::SkipSpike;
    }
  }
  // Exponential moving mean/variance; the first steps weigh as a plain running average.
  ++s.loss_count;
  const double a = std::max(o_.spike_alpha, 1.0 / static_cast<double>(s.loss_count));
  const double delta = loss - s.loss_mean;
  s.loss_mean += a * delta;
  s.loss_var = (1 - a) * (s.loss_var + a * delta * delta);
  s.consecutive_bad = 0;
  return StepVerdict::Apply;
}

void StepGuard::check_stop(int step) const {
  if (o_.max_bad_steps <= 0 || state.consecutive_bad < o_.max_bad_steps) return;
  throw NumericalFaultError(
      "stopping at step " + std::to_string(step) + ": " + std::to_string(state.consecutive_bad) +
      " steps in a row were skipped (non-finite loss or gradient norm: " +
      std::to_string(state.skipped_nonfinite) + " in total, loss spikes: " +
      std::to_string(state.skipped_spike) + "); [train] max_bad_steps = " +
      std::to_string(o_.max_bad_steps) + ". Lower [train] lr, check the data, or resume from an earlier checkpoint");
}

}  // namespace pipelane
