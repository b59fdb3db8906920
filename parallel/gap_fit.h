// The fit rule of lane steps in a gap, as a pure function: the gap scheduler (lanes/) uses it for
// live gaps and for its frozen plan, the simulator (parallel/sim/) for simulated gaps, so both
// place side work by the same rule.
//
// Lanes take turns round-robin from a cursor. The next step goes to the first lane, from the
// cursor on, that may run and whose predicted step cost fits what is left of the gap's budget:
//   elapsed + predicted_step_cost <= budget,   budget = predicted_gap * margin.
// The cursor then moves past the chosen lane; when none fits it stays where it was.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>

namespace pipelane {

struct GapFitChoice {
  std::size_t lane = 0;    // the lane to step (meaningless when !found)
  std::size_t cursor = 0;  // where the round-robin continues
  bool found = false;
};

// step_cost(i): lane i's predicted step cost in seconds, or nullopt when lane i may not run
// (quarantined, finished, not yet calibrated). `lanes` may be 0 (nothing fits).
GapFitChoice next_fitting_step(std::size_t lanes, std::size_t cursor, double elapsed_s, double budget_s,
                               const std::function<std::optional<double>(std::size_t)>& step_cost);

// The time lane steps may fill in a gap predicted to last predicted_gap_s.
inline double gap_budget(double predicted_gap_s, double margin) { return predicted_gap_s * margin; }

// A runaway step: longer than `factor` x its prediction and than `min_s` (a preempted 2 us step is
// no runaway). The gap scheduler quarantines a lane when too many of its recent steps are (a rate
// over a window: one alone is forgiven, it can be the machine); such a step never counts in the
// lane's predicted step cost.
inline bool is_runaway_step(double duration_s, double predicted_s, double factor, double min_s) {
  return predicted_s > 0 && duration_s > factor * predicted_s && duration_s > min_s;
}

}  // namespace pipelane
