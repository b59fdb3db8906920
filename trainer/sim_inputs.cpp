// load_run_profile, load_lane_models, job_from_options (load_cluster: sim_cluster_file.cpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "parallel/rank_grid.h"
#include "trainer/parallel_trainer.h"
#include "trainer/sim_inputs.h"

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

// Means, not medians: an iteration is a sum of many instructions, so its typical length is the
// sum of their means (a loaded machine's preemptions included), as the run's own
// measured_op_ms are means.
double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / v.size();
}

// 101 quantiles (0%, 1%, ..., 100%) of the samples, or the samples themselves when fewer.
std::vector<double> quantiles(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  if (samples.size() <= 101) return samples;
  std::vector<double> q;
  for (int k = 0; k <= 100; ++k) {
    const double pos = k / 100.0 * (samples.size() - 1);
    const std::size_t i = std::min(static_cast<std::size_t>(pos), samples.size() - 2);
    q.push_back(samples[i] + (pos - i) * (samples[i + 1] - samples[i]));
  }
  return q;
}

// Per stage, chunk and pass: the means of a run's traced instructions after its first step,
// GradSync's own work (its time minus its wait), the optimizer step. Lane steps by lane name.
struct TraceDigest {
  std::optional<sim::OpTable> ops;
  std::optional<double> wake_s;
  std::map<std::string, std::vector<double>> lane_step_s;
  std::map<std::string, double> lane_units;
};

TraceDigest digest_trace(const json& trace, const sim::JobSpec& job, const std::string& path) {
  const ScheduleSpec& spec = job.schedule;
  const RankGrid grid({job.tp, job.dp, spec.pp});
  const int v = spec.virtual_stages;
  using Samples = std::vector<std::vector<std::vector<double>>>;  // [stage][chunk] -> seconds
  Samples fwd(spec.pp, std::vector<std::vector<double>>(v)), bwd = fwd, weight = fwd;
  std::vector<std::vector<double>> opt(spec.pp), sync(spec.pp);
  std::map<int, double> first_step_end;  // tid -> end of its step 0 (us)
  std::map<std::pair<int, long long>, double> sync_wait;  // (tid, end in us) -> wait (us)
  TraceDigest d;
  if (!trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw SimInputError(path + ": expected a Chrome trace with traceEvents");
  const json& events = trace["traceEvents"];
  for (const json& e : events) {
    const std::string cat = e.value("cat", "");
    if (cat == "step" && e.contains("args") && e["args"].value("index", -1) == 0)
      first_step_end[e.value("tid", -1)] = e.value("ts", 0.0) + e.value("dur", 0.0);
    if (cat == "wait" && e.value("name", "") == "wait: SyncWait")
      sync_wait[{e.value("tid", -1), std::llround(e.value("ts", 0.0) + e.value("dur", 0.0))}] = e.value("dur", 0.0);
    if (cat == "lane") {
      const std::string lane = e.value("name", "");
      d.lane_step_s[lane].push_back(e.value("dur", 0.0) * 1e-6);
      d.lane_units[lane] += e.contains("args") ? e["args"].value("units", 0.0) : 0.0;
    }
  }
  // Waking: each traced receive that was waiting when its message was sent (on the neighbour: same
  // tp and dp coordinates, same step), from the second step on: from the send to the wait's end.
  std::map<int, std::vector<double>> step_starts;  // tid -> its steps' start times (us), ascending
  for (const json& e : events)
    if (e.value("cat", "") == "step") step_starts[e.value("tid", -1)].push_back(e.value("ts", 0.0));
  for (auto& [tid, starts] : step_starts) std::sort(starts.begin(), starts.end());
  const auto step_of = [&](int tid, double ts) {
    const std::vector<double>& starts = step_starts[tid];
    return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), ts) - starts.begin()) - 1;
  };
  using MessageKey = std::tuple<int, int, int, int, int, int, int>;  // dp, tp, step, dir, to stage, to chunk, mb
  std::map<MessageKey, double> sent;
  for (const json& e : events) {
    const std::string op = e.value("name", "");
    if (e.value("cat", "") != "instr" || (op != "SendFwd" && op != "SendBwd")) continue;
    const int tid = e.value("tid", -1);
    if (tid < 0 || tid >= job.world() || !e.contains("args")) continue;
    const RankCoords at = grid.coords(tid);
    const int chunk = e["args"].value("chunk", 0), mb = e["args"].value("microbatch", 0);
    const StageChunk to = op == "SendFwd" ? next_virtual_stage(spec, at.pp, chunk) : prev_virtual_stage(spec, at.pp, chunk);
    sent[{at.dp, at.tp, step_of(tid, e.value("ts", 0.0)), op == "SendFwd" ? 0 : 1, to.stage, to.chunk, mb}] =
        e.value("ts", 0.0);
  }
  // Waits with lane steps in them end at a poll after a step, not on waking: left out.
  std::map<int, std::vector<double>> lane_starts;  // rank -> its lane steps' start times (us)
  for (const json& e : events)
    if (e.value("cat", "") == "lane") lane_starts[(e.value("tid", 10000) - 10000) / 100].push_back(e.value("ts", 0.0));
  for (auto& [rank, starts] : lane_starts) std::sort(starts.begin(), starts.end());
  const auto lanes_ran = [&](int rank, double from, double to) {
    const std::vector<double>& starts = lane_starts[rank];
    const auto first = std::lower_bound(starts.begin(), starts.end(), from);
    return first != starts.end() && *first < to;
  };
  std::vector<double> transfers;
  for (const json& e : events) {
    const std::string op = e.value("name", "");
    if (e.value("cat", "") != "instr" || (op != "RecvFwd" && op != "RecvBwd") || !(e.value("dur", 0.0) > 0)) continue;
    const int tid = e.value("tid", -1);
    if (tid < 0 || tid >= job.world() || !e.contains("args")) continue;
    const RankCoords at = grid.coords(tid);
    const int step = step_of(tid, e.value("ts", 0.0));
    if (step < 1) continue;
    const auto it = sent.find({at.dp, at.tp, step, op == "RecvFwd" ? 0 : 1, at.pp, e["args"].value("chunk", 0),
                               e["args"].value("microbatch", 0)});
    const double start = e.value("ts", 0.0), end = start + e.value("dur", 0.0);
    if (it != sent.end() && start <= it->second && end >= it->second && !lanes_ran(tid, start, end))
      transfers.push_back((end - it->second) * 1e-6);
  }
  if (!transfers.empty()) d.wake_s = mean(transfers);

  bool any = false;
  for (const json& e : events) {
    if (e.value("cat", "") != "instr") continue;
    const int tid = e.value("tid", -1);
    if (tid < 0 || tid >= job.world()) continue;
    const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    const auto first = first_step_end.find(tid);
    if (first != first_step_end.end() && ts < first->second) continue;  // the first step pages memory in
    const int stage = grid.coords(tid).pp;
    const int chunk = e.contains("args") ? e["args"].value("chunk", 0) : 0;
    if (chunk < 0 || chunk >= v) continue;
    const std::string op = e.value("name", "");
    const double s = dur * 1e-6;
    if (op == "Fwd") fwd[stage][chunk].push_back(s);
    else if (op == "Bwd") bwd[stage][chunk].push_back(s);
    else if (op == "BwdWeight") weight[stage][chunk].push_back(s);
    else if (op == "OptimizerStep") opt[stage].push_back(s);
    else if (op == "GradSync") {
      const auto w = sync_wait.find({tid, std::llround(ts + dur)});
      sync[stage].push_back(std::max(0.0, dur - (w == sync_wait.end() ? 0.0 : w->second)) * 1e-6);
    } else {
      continue;
    }
    any = true;
  }
  if (!any) return d;
  sim::OpTable t;
  t.fwd.assign(spec.pp, std::vector<double>(v, 0.0));
  t.bwd = t.fwd;
  t.bwd_weight = t.fwd;
  for (int s = 0; s < spec.pp; ++s) {
    for (int c = 0; c < v; ++c) {
      if (fwd[s][c].empty() || bwd[s][c].empty())
        throw SimInputError(path + ": no traced Fwd/Bwd of stage " + std::to_string(s) + " chunk " + std::to_string(c) +
                            " after the first step (run more steps)");
      t.fwd[s][c] = mean(fwd[s][c]);
      t.bwd[s][c] = mean(bwd[s][c]);
      t.bwd_weight[s][c] = mean(weight[s][c]);
    }
    t.optimizer.push_back(mean(opt[s]));
    t.sync.push_back(mean(sync[s]));
  }
  d.ops = t;
  return d;
}

}  // namespace

TrainOptions train_options_from_args(const std::vector<std::string>& args, const std::string& fallback_config) {
  std::vector<std::string> argv = {"train"};
  const bool has_config = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a == "--config" || a.rfind("--config=", 0) == 0;
  });
  if (!has_config && !fallback_config.empty()) {
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
  const TraceDigest digest = digest_trace(read_json(trace_path, "the run's trace.json"), profile.job, trace_path);
  profile.instructions = digest.ops;
  profile.wake_s = digest.wake_s;
  out.had_trace = digest.ops.has_value();
  const json lanes_total = summary.contains("lanes") && summary["lanes"].is_object() && summary["lanes"].contains("total")
                               ? summary["lanes"]["total"] : json::object();
  for (const auto& [name, samples] : digest.lane_step_s) {
    if (samples.empty()) continue;
    sim::LaneModel lane;
    lane.name = name;
    lane.step_s = quantiles(samples);
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
