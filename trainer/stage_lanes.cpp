#include "trainer/stage_lanes.h"

#include <cstdio>
#include <filesystem>

#include "lanes/isolation/plugin_probe.h"
#include "lanes/lane_registry.h"
#include "trainer/lane_plan.h"

namespace pipelane {
namespace {

// This very binary: a lane worker is `pipelane lane-worker`, so it is the same build as the trainer.
std::string own_executable() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "pipelane" : self.string();
}

}  // namespace

StageLanes::StageLanes(const TrainOptions& opts, const Topology& topo, Backend& backend,
                       std::chrono::steady_clock::time_point origin) {
  const LanesOptions& lo = opts.lanes;
  const std::vector<std::string> names = lo.enabled_lanes();
  if (names.empty() || !lo.runs_on_stage(topo.me.pp)) return;
  LaneIsolationOptions isolation;
  isolation.mode = parse_isolation_mode(lo.isolation);
  isolation.worker_command = {own_executable(), "lane-worker"};
  isolation.worker_threads = backend.threads();
  LaneRegistry registry = LaneRegistry::with_builtins();
  for (const std::string& plugin : lo.plugin_paths()) {
    if (isolation.mode == LaneIsolationOptions::Mode::Thread) {
      registry.load_plugin(plugin);  // trusted: loaded here
    } else {  // never loaded here, not even to read its name
      const PluginDescription d = describe_plugin_in_worker(plugin, isolation.worker_command);
      registry.add_worker_plugin(d.name, {d.work_unit, plugin});
    }
  }
  GapSchedulerOptions g;
  g.stage = topo.me.pp;
  g.rank = topo.world_rank;
  g.seed = opts.train.seed;
  g.lane_memory_bytes = static_cast<std::size_t>(lo.memory_mb) << 20;
  g.stage_memory_bytes = static_cast<std::size_t>(lo.stage_memory_mb) << 20;
  g.margin = lo.margin;
  g.deterministic = lo.deterministic || !lo.plan.empty();  // a replayed plan is deterministic mode's
  g.profile_iterations = lo.profile_iterations;
  g.output_root = (std::filesystem::path(opts.run.dir) / "lanes").string();
  g.lane_output_bytes = static_cast<std::uint64_t>(lo.output_mb) << 20;
  // One instance of the lanes on every rank of a stage that runs them, counted in world-rank order.
  const ParallelDims dims = topo.grid.dims();
  g.world_size = dims.world();
  g.instance_count = 0;
  for (int r = 0; r < dims.world(); ++r)
    if (lo.runs_on_stage(topo.grid.coords(r).pp)) {
      if (r < topo.world_rank) ++g.instance_index;
      ++g.instance_count;
    }
  // The scheduler's lines start with "lanes: stage S rank R: ".
  scheduler_ = std::make_unique<GapScheduler>(
      backend, make_lane_specs(registry, names, lo.lane_sections, lo.lane_sections_source, isolation), g, origin,
      [](const std::string& line) { std::fprintf(stderr, "pipelane %s\n", line.c_str()); });
  if (!lo.plan.empty()) scheduler_->set_plan(load_lane_plans(opts, dims).at(topo.world_rank));
}

nlohmann::json StageLanes::calibrate() {
  if (!scheduler_) return {};
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [lane, seconds] : scheduler_->calibrate()) out[lane] = seconds;
  return out;
}

void StageLanes::teardown() {
  if (scheduler_) scheduler_->teardown();
}

nlohmann::json StageLanes::summary() const { return scheduler_ ? to_json(scheduler_->summary()) : nlohmann::json(); }

nlohmann::json StageLanes::trace_events(int world_rank) const {
  nlohmann::json events = nlohmann::json::array();
  if (!scheduler_) return events;
  const std::vector<std::string> names = scheduler_->lane_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0},
                      {"tid", 10000 + 100 * world_rank + static_cast<int>(i)},
                      {"args", {{"name", "rank " + std::to_string(world_rank) + " lane " + names[i]}}}});
  constexpr std::size_t kMaxEvents = 20000;  // a long run's trace stays openable
  std::size_t n = 0;
  for (const LaneStepRecord& r : scheduler_->step_records()) {
    if (++n > kMaxEvents) break;
    const auto it = std::find(names.begin(), names.end(), r.lane);
    const int idx = static_cast<int>(it - names.begin());
    events.push_back({{"name", r.lane}, {"cat", r.iteration < 0 ? "lane-calibration" : "lane"},
                      {"ph", "X"}, {"pid", 0}, {"tid", 10000 + 100 * world_rank + idx},
                      {"ts", r.start_s * 1e6}, {"dur", (r.end_s - r.start_s) * 1e6},
                      {"args", {{"iteration", r.iteration}, {"gap", r.gap_id},
                                {"kind", wait_kind_name(r.kind)}, {"units", r.units}}}});
  }
  return events;
}

nlohmann::json lanes_summary_json(const std::vector<std::string>& per_rank, int stages,
                                  const LaneValuation& valuation, double train_seconds, double step_ms_median,
                                  int world) {
  std::vector<StageLaneSummary> ranks;
  nlohmann::json per_rank_json = nlohmann::json::array();
  for (const std::string& text : per_rank) {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.is_null()) {
      per_rank_json.push_back(nullptr);
      continue;
    }
    ranks.push_back(stage_lane_summary_from_json(j));
    per_rank_json.push_back(to_json(ranks.back()));
  }
  const CombinedLaneSummary total = combine_lane_summaries(ranks);
  nlohmann::json per_stage = nlohmann::json::array();
  int stage = 0;
  for (const CombinedLaneSummary& combined : lane_summaries_per_stage(ranks, stages)) {
    nlohmann::json entry = valued_lanes_json(combined, valuation.value_lanes(combined, train_seconds));
    entry["stage"] = stage++;
    per_stage.push_back(std::move(entry));
  }
  return {{"total", valued_total_json(total, valuation.value(total, train_seconds, step_ms_median, world))},
          {"per_stage", per_stage},
          {"per_rank", per_rank_json}};
}

}  // namespace pipelane
