#include "trainer/cli/lane_bench_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "lanes/lane_registry.h"
#include "runtime/backend_registry.h"
#include "trainer/cli/command_options.h"
#include "trainer/config/train_options.h"

namespace pipelane {

namespace po = boost::program_options;

namespace {

// The lane's options come as `train` takes them (--config FILE's [lane.NAME], --lane.NAME.key=value,
// --lanes.plugins, --lanes.memory_mb: issue #25); --set, --plugin and --memory-mb are the older
// names, kept as aliases (scripts use them) and applied after.
struct LaneBenchRequest {
  std::string name, out_dir;
  double seconds = 5;
  int memory_mb = 0;  // 0: [lanes] memory_mb
  std::vector<std::string> sets, plugins;
  bool json = false;
  TrainOptions train;  // the train keys given
};

// The lane's options: its [lane.NAME] section (config file or command line), then --set KEY=VALUE;
// `source` says where from.
std::map<std::string, std::string> lane_option_values(const LaneBenchRequest& req, std::string& source) {
  std::map<std::string, std::string> values;
  const auto it = req.train.lanes.lane_sections.find(req.name);
  if (it != req.train.lanes.lane_sections.end()) values = it->second;
  source = req.train.lanes.lane_sections_source;
  for (const std::string& kv : req.sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--set " + kv + ": expected KEY=VALUE");
    values[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return values;
}

struct LaneBenchResult {
  std::string work_unit;
  std::size_t steps = 0;
  double units = 0, step_s = 0, setup_s = 0, step_ms_median = 0;
  nlohmann::json step_ms_deciles;  // fastest, 10%, ..., slowest: what `pipelane simulate` draws from
  bool finished = false;

  double units_per_s() const { return step_s > 0 ? units / step_s : 0.0; }
  nlohmann::json to_json(const std::string& lane) const {
    return {{"lane", lane}, {"work_unit", work_unit},
            {"units", units}, {"steps", steps}, {"step_s", step_s},
            {"units_per_s", units_per_s()},
            {"step_ms_median", step_ms_median}, {"step_ms_deciles", step_ms_deciles},
            {"setup_s", setup_s}, {"finished", finished}};
  }
};

// Runs the lane's steps for req.seconds (or until it finishes) on one core.
LaneBenchResult bench_lane(const LaneBenchRequest& req) {
  std::string source;
  const std::map<std::string, std::string> values = lane_option_values(req, source);
  LaneRegistry registry = LaneRegistry::with_builtins();
  for (const std::string& p : req.train.lanes.plugin_paths()) registry.load_plugin(p);
  for (const std::string& p : req.plugins) registry.load_plugin(p);
  auto lane = registry.create(req.name);

  BackendOptions one_core;
  one_core.threads = 1;  // a lane's dedicated throughput is measured on one core
  auto backend = BackendRegistry::with_builtins().create("cpu", one_core);
  auto stream = backend->create_stream(StreamPriority::Low);
  const int memory_mb = req.memory_mb > 0 ? req.memory_mb : req.train.lanes.memory_mb;
  auto arena_owner = backend->create_arena("lane " + req.name, static_cast<std::size_t>(memory_mb) << 20);
  Arena& arena = *arena_owner;
  const LaneOptions options(req.name, values, source);
  std::filesystem::path dir = req.out_dir.empty()
                                  ? std::filesystem::temp_directory_path() / ("pipelane-lane-bench-" + req.name)
                                  : std::filesystem::path(req.out_dir);
  std::filesystem::create_directories(dir);
  LaneContext ctx{*backend, *stream, arena, options, dir.string(), 0, 1};
  using Clock = std::chrono::steady_clock;
  const auto t_setup = Clock::now();
  lane->setup(ctx);
  const double setup_s = std::chrono::duration<double>(Clock::now() - t_setup).count();
  std::vector<double> step_s;
  double units = 0, busy = 0;
  const auto start = Clock::now();
  while (!lane->finished() && std::chrono::duration<double>(Clock::now() - start).count() < req.seconds) {
    const auto t0 = Clock::now();
    units += lane->step(ctx);
    const double d = std::chrono::duration<double>(Clock::now() - t0).count();
    busy += d;
    step_s.push_back(d);
  }
  LaneBenchResult result;
  result.finished = lane->finished();  // before teardown: a torn-down lane has nothing left to ask
  lane->teardown(ctx);
  std::sort(step_s.begin(), step_s.end());
  result.work_unit = lane->work_unit();
  result.steps = step_s.size();
  result.units = units;
  result.step_s = busy;
  result.setup_s = setup_s;
  result.step_ms_median = step_s.empty() ? 0 : 1e3 * step_s[step_s.size() / 2];
  result.step_ms_deciles = nlohmann::json::array();
  for (int k = 0; k <= 10 && !step_s.empty(); ++k)
    result.step_ms_deciles.push_back(1e3 * step_s[(step_s.size() - 1) * k / 10]);
  return result;
}

}  // namespace

int lane_bench_command(int argc, char** argv) {
  LaneBenchRequest req;
  SubcommandOptions options(
      "lane-bench", "NAME [options]",
      "Runs lane NAME alone on one core and prints its dedicated throughput (work units per\n"
      "second of step time): the value lane work inside training bubbles is priced at.\n"
      "The lane's options are named as for `pipelane train`: --lane.NAME.key=value, --lanes.plugins=a.so,b.so,\n"
      "--lanes.memory_mb=MiB, or a --config FILE's [lane.NAME] and [lanes] (the command line wins).");
  options.accept_train_keys("a training config whose [lane.NAME] section (and [lanes] plugins, memory_mb) set the lane's options");
  options.add_options()
      ("set", po::value(&req.sets)->composing(), "KEY=VALUE: the older name of --lane.NAME.key=VALUE (repeatable; applied last)")
      ("seconds", value_with_default(&req.seconds), "how long to run steps (stops earlier when the lane finishes)")
      ("memory-mb", po::value(&req.memory_mb), "the older name of --lanes.memory_mb (the lane's arena quota, MiB)")
      ("plugin", po::value(&req.plugins)->composing(), "the older name of --lanes.plugins: a lane plugin (.so) to load (repeatable)")
      ("output", po::value(&req.out_dir), "directory for the lane's outputs (default: a temporary one)")
      ("json", po::bool_switch(&req.json), "print one JSON line instead of a table");
  options.add_arguments("name", po::value(&req.name), 1);
  if (const auto code = options.parse(argc, argv, [&] {
        if (req.name.empty()) throw OptionError("give the NAME of a lane");
        if (req.seconds <= 0 || (options.given("memory-mb") && req.memory_mb < 1))
          throw OptionError("--seconds and --memory-mb must be positive");
      }))
    return *code;
  try {
    req.train = options.train_options();
    const LaneBenchResult result = bench_lane(req);
    if (req.json) {
      std::cout << result.to_json(req.name).dump() << "\n";
    } else {
      std::printf("lane %s alone on one core: %zu steps in %.2f s (setup %.2f s)\n", req.name.c_str(), result.steps,
                  result.step_s, result.setup_s);
      std::printf("  %.4g %s/s, median step %.2f ms%s\n", result.units_per_s(), result.work_unit.c_str(),
                  result.step_ms_median, result.finished ? " (finished)" : "");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane lane-bench: %s\n", e.what());
    return 2;
  }
}

}  // namespace pipelane
