#include "lanes/interference_estimate.h"

#include <algorithm>
#include <cmath>

namespace pipelane {

double AfterGapSamples::squared_deviations_s2() const {
  if (count == 0) return 0;
  // Rounding can leave a tiny negative for equal samples.
  return std::max(0.0, sum_squares_s2 - sum_s * sum_s / static_cast<double>(count));
}

InterferenceEstimate estimate_interference(const std::map<int, GapIdSamples>& by_gap_id, int control_every) {
  InterferenceEstimate out;
  out.control_every = control_every;
  double delay_s = 0, variance_s2 = 0;
  for (const auto& [gap_id, s] : by_gap_id) {
    out.lane_gaps += s.lanes.count;
    out.control_gaps += s.control.count;
    const long nl = s.lanes.count, nc = s.control.count;
    // A pooled variance needs one degree of freedom beyond the two means.
    if (nl < 1 || nc < 1 || nl + nc < 3) continue;
    const double pooled = (s.lanes.squared_deviations_s2() + s.control.squared_deviations_s2()) / static_cast<double>(nl + nc - 2);
    const double n = static_cast<double>(nl);
    delay_s += n * (s.lanes.mean_s() - s.control.mean_s());
    variance_s2 += n * n * pooled * (1.0 / n + 1.0 / static_cast<double>(nc));
    out.compared_lane_gaps += nl;
    out.compared_control_gaps += nc;
  }
  if (out.lane_gaps == 0) {  // no gap was left to the lanes: nothing they could have cost
    out.estimated = control_every > 0;
    return out;
  }
  if (control_every <= 0 || out.compared_control_gaps < kMinComparedControlGaps || out.compared_lane_gaps == 0)
    return out;
  // Lane gaps of ids that had no control gap are assumed to cost what the compared ones did.
  const double scale = static_cast<double>(out.lane_gaps) / static_cast<double>(out.compared_lane_gaps);
  out.estimated = true;
  out.extra_s = delay_s * scale;
  out.stderr_s = std::sqrt(variance_s2) * scale;
  return out;
}

InterferenceEstimate combine_interference(const InterferenceEstimate& a, const InterferenceEstimate& b) {
  InterferenceEstimate out;
  out.control_every = std::max(a.control_every, b.control_every);
  out.control_gaps = a.control_gaps + b.control_gaps;
  out.lane_gaps = a.lane_gaps + b.lane_gaps;
  out.compared_lane_gaps = a.compared_lane_gaps + b.compared_lane_gaps;
  out.compared_control_gaps = a.compared_control_gaps + b.compared_control_gaps;
  out.estimated = a.estimated && b.estimated;
  if (!out.estimated) return out;
  out.extra_s = a.extra_s + b.extra_s;
  out.stderr_s = std::hypot(a.stderr_s, b.stderr_s);
  return out;
}

std::string why_not_estimated(const InterferenceEstimate& e) {
  if (e.estimated) return "";
  if (e.control_every <= 0) return "control gaps off ([lanes] control_every = 0)";
  return "not enough control gaps (" + std::to_string(e.compared_control_gaps) + " compared; each rank needs " +
         std::to_string(kMinComparedControlGaps) + ")";
}

void InterferenceSampler::gap_ended(int iteration, int gap_id, GapUse use, double scheduler_after_arrival_s) {
  if (iteration != iteration_) {  // a new iteration: the last one's gaps were reported or never will be
    ended_.clear();
    iteration_ = iteration;
  }
  ended_[gap_id] = {use, scheduler_after_arrival_s};
}

void InterferenceSampler::training_after_gaps(int iteration, const std::vector<TrainingAfterGap>& after) {
  if (iteration != iteration_) return;
  for (const TrainingAfterGap& t : after) {
    const auto it = ended_.find(t.gap_id);
    if (it == ended_.end()) continue;
    const double seconds = it->second.scheduler_s + t.compute_s;
    GapIdSamples& s = samples_[t.gap_id];
    (it->second.use == GapUse::Lanes ? s.lanes : s.control).add(seconds);
  }
  ended_.clear();
}

}  // namespace pipelane
