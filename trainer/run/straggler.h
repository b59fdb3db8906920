// Why a pipeline's measured bubble is far above the schedule's theoretical one: usually a stage
// with more work than the others (the last one holds the LM head, the first the embedding). When
// measured and theoretical differ by more than 5 points, the summary names the busiest stage, how
// much more it computes than the mean of the others, and a [parallel] layers_per_stage that would
// even them out, estimated from the measured busy time: each stage's time is taken as
// layers x c + extra, with c the cheapest per-layer time of any stage (that stage's extra = 0).
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <optional>
#include <string>
#include <vector>

namespace pipelane {

struct StragglerReport {
  int stage = 0;                     // -1: the stages compute within 5% of each other (no straggler)
  double busy_s = 0, others_mean_s = 0;
  double excess = 0;                 // busy_s / others_mean_s - 1
  std::vector<int> layers;           // the current split
  std::vector<int> suggested;        // empty when no split does better
  std::string message;               // one sentence for the console and summary.json
};

inline constexpr double kStragglerBubbleGap = 0.05;

// busy_s[p]: stage p's compute seconds (mean over its ranks); layers[p]: its layer count (empty
// when the split is not one count per stage, e.g. interleaved: then no split is suggested).
// nullopt when the gap is at most 5 points (or pp < 2).
std::optional<StragglerReport> find_straggler(const std::vector<double>& busy_s, const std::vector<int>& layers,
                                              double bubble_measured, double bubble_theoretical);

// The split of sum(layers) layers over the stages (each >= 1) that minimises the slowest stage
// under the model above.
std::vector<int> balanced_split(const std::vector<double>& busy_s, const std::vector<int>& layers);

}  // namespace pipelane
