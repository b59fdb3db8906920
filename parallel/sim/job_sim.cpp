#include "parallel/sim/job_sim.h"

#include <algorithm>
#include <stdexcept>

#include "parallel/sim/distribution.h"

namespace pipelane::sim {

namespace {


double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return median_of(v);
}

}  // namespace

JobSimReport simulate_job(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists,
                          SimCostModel& model, LaneSimulator* lanes, int iterations, int keep_timelines) {
  if (iterations < 1) throw std::invalid_argument("simulate: iterations must be >= 1");
  JobSimReport report;
  report.stages.resize(spec.pp);
  std::vector<double> window_sum(spec.pp, 0.0);
  double clock = 0;
  for (int it = 0; it < iterations; ++it) {
    model.start_iteration();
    if (lanes) lanes->start_iteration(it, clock);
    SimResult r = simulate_schedule(spec, lists, model, lanes);
    clock += r.makespan;
    report.iteration_s.push_back(r.makespan);
    // The trainer's window: from the step's start to the last compute instruction of any stage.
    double window = 0;
    for (const StageTimeline& tl : r.stages)
      for (const SimEvent& e : tl.events)
        if (is_compute(e.instr.op)) window = std::max(window, e.end);
    for (int s = 0; s < spec.pp; ++s) {
      StageReport& st = report.stages[s];
      const StageTimeline& tl = r.stages[s];
      for (int k = 0; k < 5; ++k) st.idle_by_kind_s[k] += tl.idle_by_kind[k];
      if (it == 0 && iterations > 1) continue;  // the trainer skips the first step (memory paging in)
      double busy = 0;
      for (const SimEvent& e : tl.events)
        if (is_compute(e.instr.op)) busy += e.end - e.start;
      st.busy_s += busy;
      window_sum[s] += window;
    }
    if (static_cast<int>(report.timelines.size()) < keep_timelines) report.timelines.push_back(std::move(r));
  }
  report.train_s = clock;
  const std::size_t skip = std::min<std::size_t>(2, report.iteration_s.size() / 2);
  report.step_s_median = median({report.iteration_s.begin() + skip, report.iteration_s.end()});
  for (int s = 0; s < spec.pp; ++s) {
    StageReport& st = report.stages[s];
    st.idle_s = std::max(0.0, window_sum[s] - st.busy_s);
    st.bubble_fraction = window_sum[s] > 0 ? st.idle_s / window_sum[s] : 0.0;
    report.bubble_fraction += st.bubble_fraction / spec.pp;
  }
  if (lanes)
    for (const SimGap& g : lanes->gaps()) {
      StageReport& st = report.stages[g.stage];
      const double length = g.arrived_s - g.start_s;
      ++st.gaps;
      st.bubble_s += length;
      st.harvested_s += g.harvested_s;
      if (!g.profiling) {
        st.bubble_after_profiling_s += length;
        st.harvested_after_profiling_s += g.harvested_s;
      }
    }
  if (lanes)
    for (int s = 0; s < spec.pp; ++s)
      for (const LaneTotals& t : lanes->totals()[s]) report.stages[s].overrun_s += t.overrun_s;
  return report;
}

}  // namespace pipelane::sim
