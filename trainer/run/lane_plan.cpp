#include "trainer/run/lane_plan.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "trainer/run/run_summary.h"

namespace pipelane {

namespace {

// What the instruction lists (and so the gap ids) of every rank depend on.
struct PlanShape {
  std::string schedule;
  int pp = 0, virtual_stages = 0, microbatches = 0, tp = 0, dp = 0;
  bool operator==(const PlanShape&) const = default;
  std::string describe() const {
    std::ostringstream out;
    out << "schedule " << schedule << ", pp " << pp << ", virtual stages " << virtual_stages << ", " << microbatches
        << " microbatches, tp " << tp << ", dp " << dp;
    return out.str();
  }
};

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

}  // namespace

std::map<int, LanePlan> load_lane_plans(const TrainOptions& o, ParallelDims dims) {
  const std::string& path = o.lanes.plan;
  const auto fail = [&path](const std::string& what) { return ConfigError(path + ": " + what); };
  if (!std::ifstream(path)) throw fail("cannot open the file named by [lanes] plan");
  RunSummary run;
  try {
    run = read_run_summary(path);
  } catch (const SummaryError& e) {
    throw ConfigError(e.what());
  }
  if (!run.lanes) throw fail("the run ran with lanes off: it has no lane plan");

  const ParallelShape& par = run.parallel;
  const PlanShape planned{par.schedule, par.pp, par.virtual_stages, par.microbatches, par.tp, par.dp};
  const PlanShape mine{o.parallel.schedule, dims.pp, o.parallel.virtual_stages,
                       o.train.global_batch / (o.train.micro_batch * dims.dp), dims.tp, dims.dp};
  if (!(planned == mine))
    throw fail("the plan was made for " + planned.describe() + "; this run has " + mine.describe() +
               " (its gaps are other waits)");

  const std::vector<std::optional<StageLaneSummary>>& per_rank = run.lanes->per_rank;
  const RankGrid grid(dims);
  const std::vector<std::string> enabled = o.lanes.enabled_lanes();
  const std::set<std::string> enabled_set(enabled.begin(), enabled.end());
  std::map<int, LanePlan> plans;
  for (int rank = 0; rank < dims.world(); ++rank) {
    const int stage = grid.coords(rank).pp;
    const bool runs_here = o.lanes.runs_on_stage(stage);
    const std::string where = "rank " + std::to_string(rank) + " (stage " + std::to_string(stage) + ")";
    const bool planned_here = rank < static_cast<int>(per_rank.size()) && per_rank[rank];
    if (!planned_here && !runs_here) continue;
    if (!planned_here) throw fail(where + " ran no lanes in the plan's run, this run runs lanes there ([lanes] stages)");
    StageLaneSummary entry = *per_rank[rank];
    if (entry.rank != rank || entry.stage != stage)
      throw fail("lanes.per_rank[" + std::to_string(rank) + "] is rank " + std::to_string(entry.rank) + " stage " +
                 std::to_string(entry.stage) + ", this run's " + where);
    std::set<std::string> ran;
    for (const auto& [name, lane] : entry.lanes) ran.insert(name);
    if (!runs_here) throw fail(where + " ran lanes in the plan's run, this run runs none there ([lanes] stages)");
    if (ran != enabled_set)
      throw fail(where + " ran lanes " + joined(ran) + ", this run [lanes] enabled = " + joined(enabled_set));
    if (!entry.deterministic || entry.plan.empty())
      throw fail(where + " has no frozen plan (the run needs [lanes] deterministic = true and more steps than "
                         "profile_iterations)");
    if (entry.profile_iterations != o.lanes.profile_iterations)
      throw fail("the plan's run profiled " + std::to_string(entry.profile_iterations) +
                 " iterations, this run [lanes] profile_iterations = " + std::to_string(o.lanes.profile_iterations));
    // Control gaps are left empty whatever the plan says: the same ones only at the same rate.
    const int control_every = entry.interference ? entry.interference->control_every : 0;
    if (control_every != o.lanes.control_every)
      throw fail("the plan's run left " + (control_every > 0 ? "one gap in " + std::to_string(control_every) : std::string("no gap")) +
                 " empty as a control gap, this run [lanes] control_every = " + std::to_string(o.lanes.control_every));
    for (const auto& [gap_id, names] : entry.plan)
      for (const std::string& name : names)
        if (!ran.count(name))
          throw fail(where + ": gap " + std::to_string(gap_id) + " plans lane '" + name + "', which it does not run");
    plans[rank] = std::move(entry.plan);
  }
  return plans;
}

}  // namespace pipelane
