// load_run_profile, load_lane_models, job_from_options (load_cluster: sim_cluster_file.cpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "parallel/rank_grid.h"
#include "trainer/parallel_trainer.h"
#include "parallel/sim/distribution.h"
#include "trainer/sim_inputs.h"
#include "trainer/sim_run_trace.h"

namespace pipelane {

namespace {

using nlohmann::json;

json read_json(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw SimInputError(path + ": cannot open " + what);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw SimInputError(path + ": " + what + " is not JSON: " + e.what());
  }
}

}  // namespace

std::optional<std::vector<std::string>> parse_command_options(int argc, char** argv,
                                                              const boost::program_options::options_description& own,
                                                              boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  const po::parsed_options parsed = po::command_line_parser(argc, argv).options(own).allow_unregistered().run();
  po::store(parsed, vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << own << "\n";
    return std::nullopt;
  }
  return po::collect_unrecognized(parsed.options, po::include_positional);
}

bool has_config_argument(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "--config" || a.rfind("--config=", 0) == 0; });
}

TrainOptions train_options_from_args(const std::vector<std::string>& args, const std::string& fallback_config) {
  std::vector<std::string> argv = {"train"};
  if (!has_config_argument(args) && !fallback_config.empty()) {
    argv.push_back("--config");
    argv.push_back(fallback_config);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> cargs;
  for (const std::string& a : argv) cargs.push_back(a.c_str());
  try {
    return parse_train_options(static_cast<int>(cargs.size()), cargs.data());
  } catch (const ConfigError& e) {
    throw SimInputError(e.what());
  }
}

sim::JobSpec job_from_options(const TrainOptions& o, int cluster_devices) {
  sim::JobSpec job;
  job.model = gpt_config_from(o.model);
  job.seq_len = o.model.seq_len;
  job.micro_batch = o.train.micro_batch;
  job.tp = o.parallel.tp;
  const int model_parallel = o.parallel.tp * o.parallel.pp;
  job.dp = o.parallel.dp > 0 ? o.parallel.dp : std::max(1, cluster_devices / model_parallel);
  job.schedule.kind = parse_schedule_kind(o.parallel.schedule);
  job.schedule.pp = o.parallel.pp;
  job.schedule.virtual_stages = o.parallel.virtual_stages;
  const int per_replica = o.train.global_batch / o.train.micro_batch;
  if (per_replica % job.dp != 0)
    throw SimInputError("[train] global_batch = " + std::to_string(o.train.global_batch) + " is not micro_batch (" +
                        std::to_string(o.train.micro_batch) + ") x dp (" + std::to_string(job.dp) +
                        ") x a whole number of microbatches");
  job.schedule.microbatches = per_replica / job.dp;
  job.layers_per_stage = o.parallel.layers_per_stage;
  return job;
}

RunProfile load_run_profile(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const std::string config = (fs::path(run_dir) / "config.ini").string();
  const std::string summary_path = (fs::path(run_dir) / "summary.json").string();
  if (!fs::exists(config) || !fs::exists(summary_path))
    throw SimInputError(run_dir + ": not a finished run directory (config.ini and summary.json expected)");
  RunProfile out;
  const char* args[] = {"train", "--config", config.c_str()};
  try {
    out.options = parse_train_options(3, args);
  } catch (const ConfigError& e) {
    throw SimInputError(e.what());
  }
  const json summary = read_json(summary_path, "the run's summary.json");
  if (summary.value("simulated", false))
    throw SimInputError(summary_path + ": a simulated run's summary; a profile must be measured");
  if (!summary.contains("measured_op_ms") || !summary.contains("parallel"))
    throw SimInputError(summary_path + ": no measured_op_ms / parallel (a run of `pipelane train` expected)");
  const json& p = summary["parallel"];
  const int world = p.value("tp", 1) * p.value("dp", 1) * p.value("pp", 1);
  TrainOptions as_run = out.options;
  as_run.parallel.dp = p.value("dp", 1);
  sim::MeasuredProfile& profile = out.profile;
  profile.source = run_dir;
  profile.job = job_from_options(as_run, world);
  const json& ms = summary["measured_op_ms"];
  profile.t_f = ms.value("forward", 0.0) * 1e-3;
  profile.t_b = ms.value("backward", 0.0) * 1e-3;
  profile.t_w = ms.value("backward_weight", 0.0) * 1e-3;

  const std::string trace_path = (fs::path(run_dir) / "trace.json").string();
  if (!fs::exists(trace_path)) return out;
  const TraceDigest digest = digest_run_trace(read_json(trace_path, "the run's trace.json"), profile.job, trace_path);
  profile.instructions = digest.ops;
  profile.wake_samples = digest.wake_samples;
  out.had_trace = digest.ops.has_value();
  const json lanes_total = summary.contains("lanes") && summary["lanes"].is_object() && summary["lanes"].contains("total")
                               ? summary["lanes"]["total"] : json::object();
  for (const auto& [name, samples] : digest.lane_step_s) {
    if (samples.empty()) continue;
    sim::LaneModel lane;
    lane.name = name;
    lane.step_s = sim::equally_likely(samples);
    lane.step_sequence = samples;
    lane.units_per_step = digest.lane_units.at(name) / samples.size();
    if (!(lane.units_per_step > 0)) lane.units_per_step = 1;
    if (lanes_total.contains("lanes") && lanes_total["lanes"].contains(name))
      lane.work_unit = lanes_total["lanes"][name].value("work_unit", lane.work_unit);
    lane.source = trace_path;
    out.lanes.push_back(lane);
  }
  return out;
}

std::vector<sim::LaneModel> load_lane_models(const std::string& path, const ClusterFile& cluster) {
  std::ifstream in(path);
  if (!in) throw SimInputError(path + ": cannot open the lanes file");
  std::vector<sim::LaneModel> lanes;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception&) {
      throw SimInputError(where + ": expected one JSON object per line (as `pipelane lane-bench NAME --json` prints)");
    }
    const auto number = [&](const char* key, double fallback) {
      if (!j.contains(key)) return fallback;
      if (!j[key].is_number() || !(j[key].get<double>() >= 0))
        throw SimInputError(where + ": \"" + key + "\" must be a number >= 0");
      return j[key].get<double>();
    };
    if (!j.is_object() || !j.contains("lane") || !j["lane"].is_string())
      throw SimInputError(where + ": expected \"lane\": NAME");
    sim::LaneModel lane;
    lane.name = j["lane"].get<std::string>();
    lane.work_unit = j.value("work_unit", std::string("steps"));
    lane.source = j.value("source", where);
    if (j.contains("step_ms_deciles")) {
      if (!j["step_ms_deciles"].is_array() || j["step_ms_deciles"].size() < 2)
        throw SimInputError(where + ": \"step_ms_deciles\" must be a list of step times from the fastest to the slowest");
      for (const json& q : j["step_ms_deciles"]) {
        if (!q.is_number() || !(q.get<double>() > 0)) throw SimInputError(where + ": \"step_ms_deciles\" must hold numbers > 0");
        lane.step_s.push_back(q.get<double>() * 1e-3);
      }
      if (!std::is_sorted(lane.step_s.begin(), lane.step_s.end()))
        throw SimInputError(where + ": \"step_ms_deciles\" must be ascending");
      lane.step_s = sim::from_quantiles(lane.step_s);
    } else {
      const double median_ms = number("step_ms_median", 0);
      if (!(median_ms > 0)) throw SimInputError(where + ": lane " + lane.name + " needs \"step_ms_median\" > 0");
      lane.step_s = {median_ms * 1e-3};
    }
    const double units = number("units", 0), steps = number("steps", 0);
    lane.units_per_step = number("units_per_step", units > 0 && steps > 0 ? units / steps : 1.0);
    lane.dedicated_units_per_s = number("units_per_s", 0);
    if (j.contains("dedicated_device")) {
      lane.dedicated_device = j.value("dedicated_device", "");
      lane.dedicated_price_per_hour = find_device(cluster, lane.dedicated_device, where + ": dedicated_device").price_per_hour;
    }
    lane.dedicated_price_per_hour = number("dedicated_price_per_hour", lane.dedicated_price_per_hour);
    lane.memory_bytes = number("memory_mb", 0) * 1024.0 * 1024.0;
    lane.requests_per_s = number("requests_per_s", 0);
    if (std::any_of(lanes.begin(), lanes.end(), [&](const sim::LaneModel& l) { return l.name == lane.name; }))
      throw SimInputError(where + ": lane " + lane.name + " given twice");
    lanes.push_back(lane);
  }
  if (lanes.empty()) throw SimInputError(path + ": no lanes (one JSON object per line)");
  return lanes;
}

}  // namespace pipelane
