#include "trainer/stage_lanes.h"

#include <cstdio>
#include <filesystem>

#include "lanes/isolation/plugin_probe.h"
#include "lanes/lane_registry.h"

namespace pipelane {
namespace {

// This very binary: a lane worker is `pipelane lane-worker`, so it is the same build as the trainer.
std::string own_executable() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "pipelane" : self.string();
}

}  // namespace

StageLanes::StageLanes(const TrainOptions& opts, const Topology& topo, Device& device,
                       std::chrono::steady_clock::time_point origin) {
  const LanesOptions& lo = opts.lanes;
  const std::vector<std::string> names = lo.enabled_lanes();
  if (names.empty() || !lo.runs_on_stage(topo.me.pp)) return;
  LaneIsolationOptions isolation;
  isolation.mode = parse_isolation_mode(lo.isolation);
  isolation.worker_command = {own_executable(), "lane-worker"};
  isolation.worker_threads = device.threads();
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
  g.deterministic = lo.deterministic;
  g.profile_iterations = lo.profile_iterations;
  g.output_root = (std::filesystem::path(opts.run.dir) / "lanes").string();
  g.lane_output_bytes = static_cast<std::uint64_t>(lo.output_mb) << 20;
  const int rank = topo.world_rank;
  scheduler_ = std::make_unique<GapScheduler>(
      device, make_lane_specs(registry, names, lo.lane_sections, lo.lane_sections_source, isolation), g, origin,
      [rank](const std::string& line) { std::fprintf(stderr, "pipelane lanes: rank %d: %s\n", rank, line.c_str()); });
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

nlohmann::json StageLanes::summary() const { return scheduler_ ? scheduler_->summary() : nlohmann::json(); }

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

namespace {
double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
}  // namespace

nlohmann::json combine_lane_summaries(const nlohmann::json& per_rank) {
  double bubble = 0, harvested = 0, overrun = 0, bubble_filled = 0, harvested_filled = 0;
  nlohmann::json lanes = nlohmann::json::object();
  nlohmann::json quarantined = nlohmann::json::array();
  for (const auto& r : per_rank) {
    if (r.is_null() || !r.contains("bubble_s")) continue;
    bubble += number(r, "bubble_s");
    harvested += number(r, "harvested_s");
    overrun += number(r, "overrun_s");
    bubble_filled += number(r, "bubble_after_profiling_s");
    harvested_filled += number(r, "harvested_after_profiling_s");
    if (r.contains("lanes"))
      for (const auto& [name, l] : r["lanes"].items()) {
        auto& t = lanes[name];
        for (const char* k : {"units", "lane_s", "harvested_s", "overrun_s", "steps"})
          t[k] = number(t, k) + number(l, k);
        if (l.contains("work_unit")) t["work_unit"] = l["work_unit"];
        if (l.contains("quarantine_reason") && !l["quarantine_reason"].is_null())
          quarantined.push_back({{"lane", name}, {"rank", number(r, "rank")}, {"reason", l["quarantine_reason"]}});
      }
  }
  for (auto& [name, t] : lanes.items())
    t["units_per_lane_s"] = t["lane_s"].get<double>() > 0 ? t["units"].get<double>() / t["lane_s"].get<double>() : 0.0;
  return {{"bubble_s", bubble}, {"harvested_s", harvested},
          {"harvest_fraction", bubble > 0 ? harvested / bubble : 0.0}, {"overrun_s", overrun},
          {"bubble_after_profiling_s", bubble_filled}, {"harvested_after_profiling_s", harvested_filled},
          {"harvest_fraction_after_profiling", bubble_filled > 0 ? harvested_filled / bubble_filled : 0.0},
          {"lanes", lanes}, {"quarantined", quarantined}};
}

nlohmann::json lane_summaries_per_stage(const nlohmann::json& per_rank, int stages) {
  nlohmann::json out = nlohmann::json::array();
  for (int stage = 0; stage < stages; ++stage) {
    nlohmann::json mine = nlohmann::json::array();
    for (const auto& r : per_rank)
      if (r.is_object() && r.contains("stage") && r["stage"] == stage) mine.push_back(r);
    nlohmann::json combined = combine_lane_summaries(mine);
    combined["stage"] = stage;
    out.push_back(std::move(combined));
  }
  return out;
}

}  // namespace pipelane
