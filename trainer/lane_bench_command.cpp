#include "trainer/lane_bench_command.h"

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
#include "trainer/train_options.h"

namespace pipelane {

namespace po = boost::program_options;

int lane_bench_command(int argc, char** argv) {
  std::string name, config, out_dir;
  double seconds = 5;
  int memory_mb = 256;
  std::vector<std::string> sets, plugins;
  bool json = false;
  po::options_description desc(
      "usage: pipelane lane-bench NAME [options]\n\n"
      "Runs lane NAME alone on one core and prints its dedicated throughput (work units per\n"
      "second of step time): the value lane work inside training bubbles is priced at.\n\noptions");
  desc.add_options()("help", "print this help")
      ("config", po::value(&config), "a training config whose [lane.NAME] section sets the lane's options")
      ("set", po::value(&sets)->composing(), "KEY=VALUE lane option (repeatable; overrides the config)")
      ("seconds", po::value(&seconds)->default_value(5), "how long to run steps (stops earlier when the lane finishes)")
      ("memory-mb", po::value(&memory_mb)->default_value(256), "the lane's arena quota")
      ("plugin", po::value(&plugins)->composing(), "lane plugin (.so) to load (repeatable)")
      ("output", po::value(&out_dir)->default_value(""), "directory for the lane's outputs (default: a temporary one)")
      ("json", po::bool_switch(&json), "print one JSON line instead of a table");
  po::options_description hidden;
  hidden.add_options()("name", po::value(&name));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("name", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help") || name.empty()) {
      std::cout << desc << "\n";
      return name.empty() && !vm.count("help") ? 2 : 0;
    }
    if (seconds <= 0 || memory_mb < 1) throw std::invalid_argument("--seconds and --memory-mb must be positive");
    std::map<std::string, std::string> values;
    std::string source = "command line";
    if (!config.empty()) {
      std::vector<std::string> args = {"train", "--config", config};
      std::vector<const char*> cargs;
      for (auto& a : args) cargs.push_back(a.c_str());
      const TrainOptions opts = parse_train_options(static_cast<int>(cargs.size()), cargs.data());
      const auto it = opts.lanes.lane_sections.find(name);
      if (it != opts.lanes.lane_sections.end()) values = it->second;
      source = config;
    }
    for (const std::string& kv : sets) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("--set " + kv + ": expected KEY=VALUE");
      values[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    LaneRegistry registry = LaneRegistry::with_builtins();
    for (const std::string& p : plugins) registry.load_plugin(p);
    auto lane = registry.create(name);

    BackendOptions one_core;
    one_core.threads = 1;  // a lane's dedicated throughput is measured on one core
    auto backend = BackendRegistry::with_builtins().create("cpu", one_core);
    auto stream = backend->create_stream(StreamPriority::Low);
    auto arena_owner = backend->create_arena("lane " + name, static_cast<std::size_t>(memory_mb) << 20);
    Arena& arena = *arena_owner;
    const LaneOptions options(name, values, source);
    std::filesystem::path dir = out_dir.empty()
                                    ? std::filesystem::temp_directory_path() / ("pipelane-lane-bench-" + name)
                                    : std::filesystem::path(out_dir);
    std::filesystem::create_directories(dir);
    LaneContext ctx{*backend, *stream, arena, options, dir.string(), 0, 1};
    using Clock = std::chrono::steady_clock;
    const auto t_setup = Clock::now();
    lane->setup(ctx);
    const double setup_s = std::chrono::duration<double>(Clock::now() - t_setup).count();
    std::vector<double> step_s;
    double units = 0, busy = 0;
    const auto start = Clock::now();
    while (!lane->finished() && std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
      const auto t0 = Clock::now();
      units += lane->step(ctx);
      const double d = std::chrono::duration<double>(Clock::now() - t0).count();
      busy += d;
      step_s.push_back(d);
    }
    const bool finished = lane->finished();  // before teardown: a torn-down lane has nothing left to ask
    lane->teardown(ctx);
    std::sort(step_s.begin(), step_s.end());
    const double median_ms = step_s.empty() ? 0 : 1e3 * step_s[step_s.size() / 2];
    const nlohmann::json result = {{"lane", name}, {"work_unit", lane->work_unit()},
                                   {"units", units}, {"steps", step_s.size()}, {"step_s", busy},
                                   {"units_per_s", busy > 0 ? units / busy : 0.0},
                                   {"step_ms_median", median_ms}, {"setup_s", setup_s},
                                   {"finished", finished}};
    if (json) {
      std::cout << result.dump() << "\n";
    } else {
      std::printf("lane %s alone on one core: %zu steps in %.2f s (setup %.2f s)\n", name.c_str(),
                  step_s.size(), busy, setup_s);
      std::printf("  %.4g %s/s, median step %.2f ms%s\n", busy > 0 ? units / busy : 0.0,
                  lane->work_unit().c_str(), median_ms, finished ? " (finished)" : "");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane lane-bench: %s\n", e.what());
    return 2;
  }
}

}  // namespace pipelane
