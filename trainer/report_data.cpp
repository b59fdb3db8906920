#include "trainer/report_data.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace pipelane::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::optional<double> number_at(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
double number_or(const json& j, const char* key, double fallback = 0) { return number_at(j, key).value_or(fallback); }

void read_metrics(const fs::path& path, RunData& run) {
  std::ifstream in(path);
  int line_no = 0, bad = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    json row;
    try {
      row = json::parse(line);
    } catch (const json::exception&) {
      ++bad;  // a line cut short by a crash or still being written
      continue;
    }
    if (!row.is_object() || !row.contains("step")) continue;
    const int step = static_cast<int>(number_or(row, "step"));
    if (const auto v = number_at(row, "val_loss")) {
      run.validation.push_back({step, *v});
      continue;
    }
    if (!row.contains("loss")) continue;
    StepMetrics m;
    m.step = step;
    m.loss = number_or(row, "loss", NAN);
    m.tokens_per_s = number_or(row, "tokens_per_s");
    m.step_ms = number_or(row, "step_ms");
    m.mfu = number_at(row, "mfu");
    m.mfu_sgemm = number_at(row, "mfu_sgemm");
    m.skipped = row.contains("skipped");
    run.steps.push_back(m);
  }
  if (bad > 0)
    run.notes.push_back(path.string() + ": " + std::to_string(bad) + " of " + std::to_string(line_no) +
                        " lines are not JSON (skipped)");
}

LaneNumbers lane_numbers(const json& l) {
  LaneNumbers n;
  n.work_unit = l.value("work_unit", std::string("units"));
  n.units = number_or(l, "units");
  n.lane_s = number_or(l, "lane_s");
  n.harvested_s = number_or(l, "harvested_s");
  n.overrun_s = number_or(l, "overrun_s");
  n.steps = number_or(l, "steps");
  return n;
}

LanesSummary read_lanes(const json& lanes) {
  LanesSummary out;
  const json& t = lanes.value("total", json::object());
  out.bubble_s = number_or(t, "bubble_s");
  out.harvested_s = number_or(t, "harvested_s");
  out.overrun_s = number_or(t, "overrun_s");
  out.harvest_fraction = number_or(t, "harvest_fraction");
  out.harvest_fraction_after_profiling = number_or(t, "harvest_fraction_after_profiling");
  if (t.contains("overhead") && t["overhead"].is_object()) out.overhead_fraction = number_at(t["overhead"], "fraction");
  if (t.contains("cost_saving") && t["cost_saving"].is_object())
    out.cost_saving_fraction = number_at(t["cost_saving"], "fraction");
  if (t.contains("lanes") && t["lanes"].is_object())
    for (const auto& [name, l] : t["lanes"].items()) out.lanes[name] = lane_numbers(l);
  if (t.contains("quarantined") && t["quarantined"].is_array())
    for (const json& q : t["quarantined"])
      out.quarantined.push_back(q.value("lane", std::string("?")) + " on rank " +
                                std::to_string(static_cast<int>(number_or(q, "rank"))) + ": " +
                                q.value("reason", std::string("")));
  if (lanes.contains("per_stage") && lanes["per_stage"].is_array())
    for (const json& s : lanes["per_stage"]) {
      LaneStage st;
      st.stage = static_cast<int>(number_or(s, "stage"));
      st.bubble_s = number_or(s, "bubble_s");
      st.harvested_s = number_or(s, "harvested_s");
      st.overrun_s = number_or(s, "overrun_s");
      if (s.contains("lanes") && s["lanes"].is_object())
        for (const auto& [name, l] : s["lanes"].items()) st.lanes[name] = lane_numbers(l);
      out.stages.push_back(std::move(st));
    }
  return out;
}

RunSummary read_summary(const json& s) {
  RunSummary r;
  r.steps_run = static_cast<int>(number_or(s, "steps"));
  r.tokens = number_or(s, "tokens");
  r.train_seconds = number_or(s, "train_seconds");
  r.tokens_per_s = number_or(s, "tokens_per_s");
  r.mfu = number_at(s, "mfu");
  r.mfu_sgemm = number_at(s, "mfu_sgemm");
  r.peak_gflops = number_at(s, "peak_gflops");
  r.peak_gflops_sgemm = number_at(s, "peak_gflops_sgemm");
  r.peak_source = s.value("peak_source", std::string(""));
  r.final_loss = number_or(s, "final_loss", NAN);
  r.final_val_loss = number_at(s, "final_val_loss");
  r.unigram_val_loss = number_at(s, "unigram_val_loss");
  if (s.contains("parallel") && s["parallel"].is_object()) {
    const json& p = s["parallel"];
    r.tp = static_cast<int>(number_or(p, "tp", 1));
    r.dp = static_cast<int>(number_or(p, "dp", 1));
    r.pp = static_cast<int>(number_or(p, "pp", 1));
    r.microbatches = static_cast<int>(number_or(p, "microbatches"));
    r.schedule = p.value("schedule", std::string(""));
  }
  r.bubble_measured = number_at(s, "bubble_fraction_measured");
  r.bubble_theoretical = number_at(s, "bubble_fraction_theoretical");
  if (s.contains("straggler") && s["straggler"].is_object())
    r.straggler = s["straggler"].value("message", std::string(""));
  if (s.contains("lanes") && s["lanes"].is_object()) r.lanes = read_lanes(s["lanes"]);
  return r;
}

// "rank 3 (tp 1/2, dp 0/1, pp 1/2)" -> 1; 0 when the name says nothing.
int stage_of_track(const std::string& track) {
  const auto at = track.find("pp ");
  int stage = 0;
  if (at != std::string::npos) std::sscanf(track.c_str() + at, "pp %d", &stage);
  return stage;
}

struct TraceEvent {
  std::string name, cat;
  int tid = 0;
  double ts = 0, dur = 0;
  const json* args = nullptr;
};

void read_trace(const fs::path& path, int traced_step, RunData& run) {
  json trace;
  try {
    std::ifstream in(path);
    trace = json::parse(in);
  } catch (const json::exception& e) {
    run.notes.push_back(path.string() + ": not readable as JSON (" + e.what() + "); no timeline");
    return;
  }
  const json* events = trace.is_object() && trace.contains("traceEvents") ? &trace["traceEvents"] : nullptr;
  if (!events || !events->is_array()) {
    run.notes.push_back(path.string() + ": no traceEvents; no timeline");
    return;
  }
  std::map<int, std::string> tracks;
  std::map<int, std::vector<TraceEvent>> by_tid;
  std::map<int, std::vector<std::pair<double, double>>> steps;  // rank -> [ts, ts + dur] by index
  std::map<int, int> step_numbers;                               // index -> training step
  for (const json& e : *events) {
    if (!e.is_object()) continue;
    const int tid = static_cast<int>(number_or(e, "tid"));
    const std::string ph = e.value("ph", std::string(""));
    const std::string name = e.value("name", std::string(""));
    if (ph == "M") {
      if (name == "thread_name" && e.contains("args")) tracks[tid] = e["args"].value("name", std::string(""));
      continue;
    }
    if (ph != "X") continue;
    TraceEvent ev{name, e.value("cat", std::string("")), tid, number_or(e, "ts") / 1e6, number_or(e, "dur") / 1e6,
                  e.contains("args") ? &e["args"] : nullptr};
    if (ev.cat == "step" && tid < 10000) {
      const int index = ev.args ? static_cast<int>(number_or(*ev.args, "index")) : 0;
      auto& v = steps[tid];
      if (static_cast<int>(v.size()) <= index) v.resize(index + 1, {0, 0});
      v[index] = {ev.ts, ev.ts + ev.dur};
      if (ev.args && ev.args->contains("step")) step_numbers[index] = static_cast<int>(number_or(*ev.args, "step"));
      continue;
    }
    by_tid[tid].push_back(ev);
  }
  if (steps.empty()) {
    run.notes.push_back(path.string() + ": no traced step; no timeline");
    return;
  }

  // Per-stage time per step over the traced steps after the first (which pages memory in).
  std::map<int, std::vector<StageTime>> per_stage;
  for (const auto& [rank, windows] : steps) {
    const std::size_t first = windows.size() > 1 ? 1 : 0;
    StageTime t;
    t.stage = stage_of_track(tracks[rank]);
    double step_total = 0;
    for (std::size_t k = first; k < windows.size(); ++k) step_total += windows[k].second - windows[k].first;
    const double lo = windows[first].first;
    for (const TraceEvent& ev : by_tid[rank]) {
      if (ev.ts < lo) continue;
      if (ev.cat == "instr" && (ev.name == "Fwd" || ev.name == "Bwd" || ev.name == "BwdWeight")) t.compute_ms += ev.dur;
      else if (ev.cat == "wait")
        t.wait_ms[ev.args ? ev.args->value("kind", ev.name) : ev.name] += ev.dur;
    }
    double waits = 0;
    for (const auto& [kind, w] : t.wait_ms) waits += w;
    t.other_ms = std::max(0.0, step_total - t.compute_ms - waits);
    const double n = static_cast<double>(windows.size() - first) / 1e3;  // seconds -> ms per step
    t.compute_ms /= n;
    t.other_ms /= n;
    for (auto& [kind, w] : t.wait_ms) w /= n;
    per_stage[t.stage].push_back(t);
  }
  for (const auto& [stage, ranks] : per_stage) {
    StageTime avg;
    avg.stage = stage;
    for (const StageTime& t : ranks) {
      avg.compute_ms += t.compute_ms / ranks.size();
      avg.other_ms += t.other_ms / ranks.size();
      for (const auto& [kind, w] : t.wait_ms) avg.wait_ms[kind] += w / ranks.size();
    }
    run.stage_times.push_back(avg);
  }

  // The timeline of one traced step, each rank from its own step start (ranks have their own
  // clocks; their steps start together after the previous step's global gradient norm).
  std::size_t traced = 0;
  for (const auto& [rank, windows] : steps) traced = std::max(traced, windows.size());
  const int index = traced_step < 0 ? static_cast<int>(traced) - 1 : std::min<int>(traced_step, static_cast<int>(traced) - 1);
  IterationTimeline tl;
  tl.step_index = index;
  tl.step = step_numbers.count(index) ? step_numbers[index] : 0;
  for (const auto& [rank, windows] : steps) {
    if (index >= static_cast<int>(windows.size())) continue;
    const auto [t0, t1] = windows[index];
    RankTimeline rt;
    rt.rank = rank;
    rt.track = tracks.count(rank) ? tracks[rank] : "rank " + std::to_string(rank);
    const auto inside = [&](const TraceEvent& ev) { return ev.ts + ev.dur > t0 && ev.ts < t1; };
    const auto slice = [&](const TraceEvent& ev, std::string name) {
      TraceSlice s;
      s.name = std::move(name);
      s.start_s = std::max(0.0, ev.ts - t0);
      s.end_s = std::min(t1, ev.ts + ev.dur) - t0;
      if (ev.args) {
        s.microbatch = static_cast<int>(number_or(*ev.args, "microbatch", -1));
        s.units = number_or(*ev.args, "units");
      }
      return s;
    };
    for (const TraceEvent& ev : by_tid[rank]) {
      if (!inside(ev)) continue;
      if (ev.cat == "instr") rt.instructions.push_back(slice(ev, ev.name));
      else if (ev.cat == "wait") rt.waits.push_back(slice(ev, ev.args ? ev.args->value("kind", ev.name) : ev.name));
    }
    for (const auto& [tid, evs] : by_tid) {
      if (tid < 10000 || (tid - 10000) / 100 != rank) continue;
      for (const TraceEvent& ev : evs)
        if (ev.cat == "lane" && inside(ev)) rt.lane_steps.push_back(slice(ev, ev.name));
    }
    tl.span_s = std::max(tl.span_s, t1 - t0);
    tl.ranks.push_back(std::move(rt));
  }
  run.timeline = std::move(tl);
}

}  // namespace

RunData load_run(const std::string& dir, int traced_step) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::runtime_error(dir + ": not a run directory (no such directory)");
  RunData run;
  run.dir = dir;
  fs::path p(dir);
  if (!p.has_filename()) p = p.parent_path();  // "runs/a/" -> "runs/a"
  run.name = p.filename().string();
  const fs::path metrics = fs::path(dir) / "metrics.jsonl", summary = fs::path(dir) / "summary.json",
                 trace = fs::path(dir) / "trace.json";
  if (!fs::exists(metrics) && !fs::exists(summary) && !fs::exists(trace))
    throw std::runtime_error(dir + ": not a run directory (no metrics.jsonl, summary.json or trace.json)");
  if (fs::exists(metrics)) read_metrics(metrics, run);
  else run.notes.push_back("no metrics.jsonl: no curves");
  if (fs::exists(summary)) {
    try {
      std::ifstream in(summary);
      run.summary = read_summary(json::parse(in));
    } catch (const json::exception& e) {
      run.notes.push_back(summary.string() + ": not readable as JSON (" + e.what() + ")");
    }
  } else {
    run.notes.push_back("no summary.json: the run has not finished (or failed)");
  }
  if (fs::exists(trace)) read_trace(trace, traced_step, run);
  else run.notes.push_back("no trace.json: no timeline");
  return run;
}

}  // namespace pipelane::report
