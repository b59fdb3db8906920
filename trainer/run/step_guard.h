// Numerical-fault handling for the training loop: a step whose loss or global gradient norm is
// NaN/Inf is skipped (AdamW not applied) and counted; `max_bad_steps` skipped steps in a row stop
// the run with NumericalFaultError. Optionally a loss spike (z-score of the loss against an
// exponential moving mean/variance of the applied steps' losses above `spike_zscore`) is skipped
// too and counts toward the same consecutive limit, so a run whose loss has shifted for good stops
// instead of skipping forever. The state lives in StepGuardState and is saved in checkpoints.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <stdexcept>
#include <string>

#include "trainer/checkpoint/progress.h"

namespace pipelane {

class NumericalFaultError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class StepVerdict { Apply, SkipNonFinite, SkipSpike };
const char* verdict_name(StepVerdict v);  // "applied", "nonfinite", "spike"

struct StepGuardOptions {
  int max_bad_steps = 5;
  double spike_zscore = 0;  // 0: off
  int spike_warmup = 20;    // applied steps before spikes are judged
  double spike_alpha = 0.05;
};

class StepGuard {
 public:
  explicit StepGuard(StepGuardOptions o = {}) : o_(o) {}
  // Judges one step from its mean loss and global gradient norm and updates the counters.
  StepVerdict judge(double loss, double grad_norm);
  // Throws NumericalFaultError when max_bad_steps steps in a row were skipped; `step` is 1-based.
  void check_stop(int step) const;
  StepGuardState state;

 private:
  StepGuardOptions o_;
};

}  // namespace pipelane
