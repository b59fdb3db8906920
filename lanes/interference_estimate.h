// What lanes cost training that their overrun does not show: a lane step leaves caches and memory
// bandwidth to training in a worse state (its working set evicted training's), and the scheduler's
// own work after the arrival (judging and learning the step's cost, accounting the gap) is spent
// on training's thread. Overrun counts only lane time after the arrival.
//
// Measured with control gaps (lanes/control_gaps.h): for each gap after profiling, either left to
// the lanes (a "lane gap": filled, or empty because nothing fitted) or a control gap left empty on
// purpose, one sample of what training spent right after it: the scheduler's time from the later
// of the arrival and the last lane step's end to fill()'s return, plus training's compute from the
// wait to its next wait (parallel/gap_filler.h: TrainingAfterGap) - in the process's CPU seconds
// (parallel/compute_after_waits.h), so that another process taking the core (a busy machine) does
// not count: lanes cannot take it, their workers being frozen while training computes. Lane gaps
// are compared as assigned, whether a lane step ran in them or not: which gaps a lane fits into
// depends on their timing, which would bias a comparison of only the filled ones; the control
// gaps are chosen blind to it. Per gap id (the same instructions follow it every iteration, so samples of one id
// are comparable, those of two ids are not):
//   delay per lane gap d = mean(after lane gaps) - mean(after control gaps)
//   its variance         = s^2 (1/n_lane + 1/n_control), s^2 the two samples' pooled variance
// and the estimate is sum over gap ids of n_lane x d, with the standard error from the summed
// variances, scaled from the lane gaps whose id could be compared to all measured lane gaps.
// The samples are sums (count, sum, sum of squares) per gap id, so memory does not grow with the
// run.
//
// What it does not see: interference lasting past the next wait (it also slows the compute after
// control gaps, so it is underestimated), and the effect on instructions that are not compute
// (the optimizer step after the gradient sync). The standard error treats samples as independent;
// a machine whose load drifts during the run makes them less so.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "parallel/gap_filler.h"

namespace pipelane {

// One gap id's samples of one kind, as sums.
struct AfterGapSamples {
  long count = 0;
  double sum_s = 0;
  double sum_squares_s2 = 0;
  void add(double seconds) {
    ++count;
    sum_s += seconds;
    sum_squares_s2 += seconds * seconds;
  }
  double mean_s() const { return count > 0 ? sum_s / static_cast<double>(count) : 0.0; }
  double squared_deviations_s2() const;  // sum of (x - mean)^2, never negative
};

struct GapIdSamples {
  AfterGapSamples lanes;    // after a gap left to the lanes
  AfterGapSamples control;  // after a control gap
};

// The estimate of one rank, or of several added up (combine).
struct InterferenceEstimate {
  int control_every = 0;           // [lanes] control_every; 0: control gaps off
  long control_gaps = 0;           // control gaps measured
  long lane_gaps = 0;              // gaps left to the lanes measured
  long compared_lane_gaps = 0;     // of those, the ones in gap ids that had control samples to compare with
  long compared_control_gaps = 0;  // the control gaps those comparisons used
  bool estimated = false;          // false: not enough control gaps (why_not_estimated says so)
  double extra_s = 0;              // training time the lanes added after their gaps, over every measured lane gap
  double stderr_s = 0;
};

// Fewer control gaps than this in comparable gap ids give no number: a mean of a handful of
// samples on a busy machine says nothing.
inline constexpr long kMinComparedControlGaps = 8;

InterferenceEstimate estimate_interference(const std::map<int, GapIdSamples>& by_gap_id, int control_every);
// Ranks' estimates added: times add, standard errors in quadrature; estimated only if every part is.
InterferenceEstimate combine_interference(const InterferenceEstimate& a, const InterferenceEstimate& b);
// "control gaps off ([lanes] control_every = 0)" or "not enough control gaps (5 compared, 8 needed)";
// "" when estimated.
std::string why_not_estimated(const InterferenceEstimate& estimate);

// Gathers the samples on one stage: the scheduler says how each gap of an iteration ended, the
// executor then how long training computed after each.
class InterferenceSampler {
 public:
  enum class GapUse { Lanes, Control };
  // A gap that ended: how it was used and the scheduler's own time after the arrival.
  void gap_ended(int iteration, int gap_id, GapUse use, double scheduler_after_arrival_s);
  // Training's compute after the waits of `iteration`; gaps not reported by gap_ended (profiling,
  // empty by chance) are not samples.
  void training_after_gaps(int iteration, const std::vector<TrainingAfterGap>& after);
  InterferenceEstimate estimate(int control_every) const { return estimate_interference(samples_, control_every); }

 private:
  struct EndedGap {
    GapUse use;
    double scheduler_s;
  };
  int iteration_ = 0;
  std::map<int, EndedGap> ended_;  // gap id -> the gap of iteration_
  std::map<int, GapIdSamples> samples_;
};

}  // namespace pipelane
