// load_run_profile, load_lane_models, job_from_options (load_cluster: trainer/config/cluster_file.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "parallel/rank_grid.h"
#include "parallel/sim/distribution.h"
#include "trainer/sim/sim_inputs.h"
#include "trainer/run/run_summary.h"
#include "trainer/sim/run_trace.h"

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

std::string fmt_ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", seconds * 1e3);
  return buf;
}

}  // namespace

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
  job.recompute = recompute_options_from(o.train);
  job.distributed_optimizer = o.train.distributed_optimizer;
  job.sequence_parallel = o.parallel.sequence_parallel;
  job.gemm_weights = o.train.gemm_weights == "bf16" ? DType::BF16 : DType::F32;
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
  RunSummary summary;
  try {
    summary = read_run_summary(summary_path);
  } catch (const SummaryError& e) {
    throw SimInputError(e.what());
  }
  if (summary.simulation)
    throw SimInputError(summary_path + ": a simulated run's summary; a profile must be measured");
  TrainOptions as_run = out.options;
  as_run.parallel.dp = summary.parallel.dp;
  sim::MeasuredProfile& profile = out.profile;
  profile.source = run_dir;
  profile.job = job_from_options(as_run, summary.parallel.world());
  profile.t_f = summary.measured_op_ms.forward * 1e-3;
  profile.t_b = summary.measured_op_ms.backward * 1e-3;
  profile.t_w = summary.measured_op_ms.backward_weight * 1e-3;
  if (summary.lanes && summary.lanes->total.interference) {
    const InterferenceEstimate& e = *summary.lanes->total.interference;
    if (e.estimated && e.lane_gaps > 0) {
      const double per_gap_s = e.extra_s / static_cast<double>(e.lane_gaps);
      const double per_gap_stderr_s = e.stderr_s / static_cast<double>(e.lane_gaps);
      out.lane_gap_delay_s = std::max(0.0, per_gap_s);
      out.lane_gap_delay_source = "measured in " + run_dir + " by its control gaps: " + fmt_ms(per_gap_s) +
                                  " +- " + fmt_ms(per_gap_stderr_s) + " ms per lane gap (" +
                                  std::to_string(e.lane_gaps) + " lane gaps, " + std::to_string(e.control_gaps) +
                                  " control gaps)" + (per_gap_s < 0 ? ", negative: taken as 0" : "");
    }
  }

  const std::string trace_path = (fs::path(run_dir) / "trace.json").string();
  if (!fs::exists(trace_path)) return out;
  const TraceDigest digest = digest_run_trace(read_json(trace_path, "the run's trace.json"), profile.job, trace_path);
  profile.instructions = digest.ops;
  profile.wake_samples = digest.wake_samples;
  out.had_trace = digest.ops.has_value();
  for (const auto& [name, samples] : digest.lane_step_s) {
    if (samples.empty()) continue;
    sim::LaneModel lane;
    lane.name = name;
    lane.step_s = sim::equally_likely(samples);
    lane.step_sequence = samples;
    lane.units_per_step = digest.lane_units.at(name) / samples.size();
    if (!(lane.units_per_step > 0)) lane.units_per_step = 1;
    if (summary.lanes && summary.lanes->total.lanes.count(name)) {
      const std::string& unit = summary.lanes->total.lanes.at(name).work_unit;
      if (!unit.empty()) lane.work_unit = unit;
    }
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
    lane.kernel_block_s = number("kernel_block_ms", 0) * 1e-3;
    if (lane.kernel_block_s > 0) {
      if (!j.contains("kernel_block_source") || !j["kernel_block_source"].is_string())
        throw SimInputError(where + ": \"kernel_block_ms\" needs \"kernel_block_source\": measured or assumed, from what");
      lane.kernel_block_source = j["kernel_block_source"].get<std::string>();
    }
    if (std::any_of(lanes.begin(), lanes.end(), [&](const sim::LaneModel& l) { return l.name == lane.name; }))
      throw SimInputError(where + ": lane " + lane.name + " given twice");
    lanes.push_back(lane);
  }
  if (lanes.empty()) throw SimInputError(path + ": no lanes (one JSON object per line)");
  return lanes;
}

}  // namespace pipelane
