#include "trainer/run/stage_lanes.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "lanes/isolation/lane_cgroup.h"
#include "lanes/isolation/plugin_probe.h"
#include "lanes/lane_registry.h"
#include "trainer/run/lane_plan.h"

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
  isolation.worker_cpus = cpus_of_this_thread();  // a worker runs on its rank's cores only
  isolation.worker_max_processes = lo.max_processes;
  isolation.hidden_dir = opts.run.dir;  // checkpoints, metrics, other lanes' files
  isolation.network_lanes = lo.network_lanes();
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
  g.control_every = lo.control_every;
  g.output_root = (std::filesystem::path(opts.run.dir) / "lanes").string();
  g.lane_output_bytes = static_cast<std::uint64_t>(lo.output_mb) << 20;
  g.lane_state_bytes = static_cast<std::uint64_t>(lo.state_mb) << 20;
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

std::map<std::string, double> StageLanes::calibrate() { return scheduler_ ? scheduler_->calibrate() : std::map<std::string, double>{}; }

void StageLanes::teardown() {
  if (scheduler_) scheduler_->teardown();
}

std::optional<StageLaneSummary> StageLanes::summary() const {
  return scheduler_ ? std::optional<StageLaneSummary>(scheduler_->summary()) : std::nullopt;
}

std::vector<TraceEvent> StageLanes::trace_events(int world_rank) const {
  std::vector<TraceEvent> events;
  if (!scheduler_) return events;
  const std::vector<std::string> names = scheduler_->lane_names();
  const auto track = [&](std::size_t lane) { return 10000 + 100 * world_rank + static_cast<int>(lane); };
  for (std::size_t i = 0; i < names.size(); ++i)
    events.push_back(track_name_event(track(i), "rank " + std::to_string(world_rank) + " lane " + names[i]));
  constexpr std::size_t kMaxEvents = 20000;  // a long run's trace stays openable
  std::size_t n = 0;
  for (const LaneStepRecord& r : scheduler_->step_records()) {
    if (++n > kMaxEvents) break;
    const auto it = std::find(names.begin(), names.end(), r.lane);
    events.push_back({r.lane, r.iteration < 0 ? "lane-calibration" : "lane", track(it - names.begin()), r.start_s * 1e6,
                      (r.end_s - r.start_s) * 1e6,
                      {integer_arg("iteration", r.iteration), integer_arg("gap", r.gap_id),
                       text_arg("kind", wait_kind_name(r.kind)), number_arg("units", r.units)}});
  }
  return events;
}

std::optional<std::map<std::string, std::string>> saved_lane_progress(const CheckpointReader& reader,
                                                                      const Topology& topo,
                                                                      GapScheduler* lanes) {
  const int rank = topo.world_rank;
  const auto skip = [&](const std::string& why) -> std::optional<std::map<std::string, std::string>> {
    std::fprintf(stderr, "pipelane lanes: rank %d: saved lane state not restored: %s; lanes start fresh\n",
                 rank, why.c_str());
    return std::nullopt;
  };
  if (!lanes) {  // say so only where this rank has saved state to drop
    bool saved_here = false;
    for (const auto& f : reader.manifest().value("lane_files", nlohmann::json::array()))
      saved_here = saved_here || f.value("rank", -1) == rank;
    return saved_here ? skip("lanes are off on this rank in this run") : std::nullopt;
  }
  if (!reader.has_lane_state()) return skip("checkpoint " + reader.dir() + " holds none (saved with lanes off)");
  const ParallelDims d = topo.grid.dims();
  const nlohmann::json& saved = reader.manifest().at("topology");
  if (saved.value("tp", 0) != d.tp || saved.value("pp", 0) != d.pp || saved.value("dp", 0) != d.dp)
    return skip("saved on grid tp " + std::to_string(saved.value("tp", 0)) + " x dp " +
                std::to_string(saved.value("dp", 0)) + " x pp " + std::to_string(saved.value("pp", 0)) +
                ", this run is tp " + std::to_string(d.tp) + " x dp " + std::to_string(d.dp) + " x pp " +
                std::to_string(d.pp));
  std::optional<LaneStates> mine = reader.lane_states(rank);
  const std::vector<std::string> names = lanes->lane_names();
  const auto joined = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& n : v) out += (out.empty() ? "" : ",") + n;
    return out.empty() ? std::string("none") : out;
  };
  if (!mine) return skip("this rank saved none");
  if (mine->lanes != names)
    return skip("saved with lanes " + joined(mine->lanes) + ", this run has " + joined(names));
  return std::move(mine->states);
}

TrainingLanes training_lanes(const std::vector<std::optional<StageLaneSummary>>& per_rank, int stages,
                             const LaneValuation& valuation, double train_seconds, double step_ms_median, int world,
                             std::optional<StepQuartiles> step_quartiles) {
  TrainingLanes out;
  out.per_rank = per_rank;
  std::vector<StageLaneSummary> ranks;
  for (const std::optional<StageLaneSummary>& rank : per_rank)
    if (rank) ranks.push_back(*rank);
  out.total = combine_lane_summaries(ranks);
  out.valuation = valuation.value(out.total, train_seconds, step_ms_median, world, step_quartiles,
                                  stages > 0 ? world / stages : 1);
  for (CombinedLaneSummary& combined : lane_summaries_per_stage(ranks, stages)) {
    std::map<std::string, LaneValue> values = valuation.value_lanes(combined, train_seconds);
    out.per_stage.push_back({std::move(combined), std::move(values)});
  }
  return out;
}

}  // namespace pipelane
