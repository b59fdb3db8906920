#include "trainer/run/run_measurements.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>

namespace pipelane {

void add_compute_times(RankMeasurements& m, const StepStats& st, int step, int start_step, int steps,
                       ControlPlane& world) {
  double busy = 0;
  float last_compute = 0;
  for (const InstrRecord& r : st.records)
    if (is_compute(r.instr.op)) {
      busy += r.end_s - r.start_s;
      last_compute = std::max(last_compute, static_cast<float>(r.end_s));
      if (step > start_step || steps == 1) m.op_times.add(r.instr.op, r.end_s - r.start_s);
    }
  world.all_reduce_max(&last_compute, 1);
  if (step > 0 || steps == 1) {  // the job's first step pages memory in: not representative
    m.busy_s += busy;
    m.window_s += last_compute - st.start_s;
  }
}

BusyByRank gather_busy_times(ControlPlane& world, const RankMeasurements& m) {
  const std::size_t n = static_cast<std::size_t>(world.size());
  std::vector<double> both(2 * n, 0.0);  // one reduction: busy and window of each rank, side by side
  both[2 * world.rank()] = m.busy_s;
  both[2 * world.rank() + 1] = m.window_s;
  world.all_reduce_sum(both.data(), both.size());
  BusyByRank out;
  for (std::size_t r = 0; r < n; ++r) {
    out.busy_s.push_back(both[2 * r]);
    out.window_s.push_back(both[2 * r + 1]);
  }
  return out;
}

std::vector<StageTime> stage_times(const RankGrid& grid, const BusyByRank& by_rank) {
  const ParallelDims dims = grid.dims();
  const int ranks = dims.tp * dims.dp;
  std::vector<StageTime> stages;
  for (int p = 0; p < dims.pp; ++p) {
    double b = 0, w = 0;
    for (int r = 0; r < dims.world(); ++r)
      if (grid.coords(r).pp == p) {
        b += by_rank.busy_s[r];
        w += by_rank.window_s[r];
      }
    const double idle = std::max(0.0, w - b);
    stages.push_back({p, b / ranks, idle / ranks, w > 0 ? idle / w : 0.0, std::nullopt});
  }
  return stages;
}

double measured_bubble(const std::vector<StageTime>& stages) {
  double sum = 0;
  for (const StageTime& st : stages) sum += st.bubble_fraction;
  return sum / static_cast<double>(stages.size());
}

double steady_step_seconds(const std::vector<double>& step_seconds) {
  std::vector<double> v(step_seconds.begin() + std::min<std::size_t>(2, step_seconds.size() / 2), step_seconds.end());
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<int> layers_per_stage(const TrainOptions& o) {
  if (o.parallel.virtual_stages != 1) return {};
  std::vector<int> out;
  std::stringstream in(o.parallel.layers_per_stage);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  if (out.empty()) out.assign(o.parallel.pp, o.model.layers / o.parallel.pp);
  return out;
}

}  // namespace pipelane
