#include "trainer/report/report_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trainer/run/run_summary.h"

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
    m.lr = number_at(row, "lr");
    m.grad_norm = number_at(row, "grad_norm");
    m.skipped = row.contains("skipped");
    run.steps.push_back(m);
  }
  if (bad > 0)
    run.notes.push_back(path.string() + ": " + std::to_string(bad) + " of " + std::to_string(line_no) +
                        " lines are not JSON (skipped)");
}

// A number summary.json wrote as null (NaN, or not known) is not shown.
std::optional<double> known(double x) { return std::isnan(x) ? std::nullopt : std::optional<double>(x); }

InterferenceView interference_view(const InterferenceEstimate& e) {
  InterferenceView v;
  if (e.estimated) {
    v.estimated_s = e.extra_s;
    v.stderr_s = e.stderr_s;
  }
  v.why_not = why_not_estimated(e);
  v.control_gaps = e.control_gaps;
  v.lane_gaps = e.lane_gaps;
  return v;
}

LaneStage lane_stage(int stage, const CombinedLaneSummary& c) {
  LaneStage st{stage, c.bubble_s, c.harvested_s, c.overrun_s, {}, std::nullopt};
  for (const auto& [name, l] : c.lanes)
    st.lanes[name] = {l.work_unit.empty() ? "units" : l.work_unit, l.units, l.lane_s, l.harvested_s, l.overrun_s,
                      static_cast<double>(l.steps)};
  if (c.interference) st.interference = interference_view(*c.interference);
  return st;
}

LaneStage lane_stage(int stage, const SimulatedLaneTotals& t) {
  LaneStage st{stage, t.bubble_s, t.harvested_s, t.overrun_s, {}, std::nullopt};
  for (const auto& [name, l] : t.lanes)
    st.lanes[name] = {l.work_unit, l.units, l.lane_s, l.harvested_s, l.overrun_s, l.steps};
  return st;
}

LanesSummary lanes_view(const TrainingLanes& lanes) {
  const CombinedLaneSummary& t = lanes.total;
  LanesSummary out;
  out.bubble_s = t.bubble_s;
  out.harvested_s = t.harvested_s;
  out.overrun_s = t.overrun_s;
  out.harvest_fraction = t.harvest_fraction();
  out.harvest_fraction_after_profiling = t.harvest_fraction_after_profiling();
  if (const auto& o = lanes.valuation.overhead) out.overhead_fraction = o->fraction();
  if (const auto& c = lanes.valuation.cost_saving) {
    out.cost_saving_fraction = c->net_fraction().value_or(c->gross_fraction());
    out.cost_saving_estimated = c->estimated;
  }
  if (t.interference) out.interference = interference_view(*t.interference);
  if (const auto& e = lanes.valuation.estimated_overhead) {
    out.estimated_overhead_fraction = e->fraction();
    out.estimated_overhead_fraction_stderr = e->fraction_stderr();
  }
  out.lanes = lane_stage(0, t).lanes;
  for (const QuarantinedLane& q : t.quarantined)
    out.quarantined.push_back(q.lane + " on rank " + std::to_string(q.rank) + ": " + q.reason);
  for (std::size_t stage = 0; stage < lanes.per_stage.size(); ++stage)
    out.stages.push_back(lane_stage(static_cast<int>(stage), lanes.per_stage[stage].lanes));
  return out;
}

LanesSummary lanes_view(const SimulatedLanes& lanes) {
  const SimulatedLaneTotals& t = lanes.total;
  LanesSummary out;
  out.bubble_s = t.bubble_s;
  out.harvested_s = t.harvested_s;
  out.overrun_s = t.overrun_s;
  out.harvest_fraction = t.harvest_fraction;
  out.harvest_fraction_after_profiling = t.harvest_fraction_after_profiling;
  out.overhead_fraction = lanes.overhead.fraction;
  out.cost_saving_fraction = lanes.cost_saving.fraction;
  out.lanes = lane_stage(0, t).lanes;
  for (const SimulatedQuarantine& q : t.quarantined)
    out.quarantined.push_back(q.lane + " on stage " + std::to_string(q.stage) + ": " + q.reason);
  for (std::size_t stage = 0; stage < lanes.per_stage.size(); ++stage)
    out.stages.push_back(lane_stage(static_cast<int>(stage), lanes.per_stage[stage].totals));
  return out;
}

// samples.jsonl: {"step", "prompt", "text", "tokens"} a line; a damaged line is skipped.
void read_samples(const fs::path& path, RunData& run) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    try {
      const json row = json::parse(line);
      if (!row.is_object() || !row.contains("text") || !row["text"].is_string()) continue;
      run.samples.push_back({static_cast<int>(number_or(row, "step")), row.value("prompt", std::string()),
                             row["text"].get<std::string>()});
    } catch (const json::exception&) {
    }
  }
}

SummaryView summary_view(const RunSummary& s) {
  SummaryView r;
  if (s.training_arena_bytes_rank0 > 0) r.training_arena_bytes_rank0 = s.training_arena_bytes_rank0;
  r.steps_run = s.steps;
  r.tokens = s.tokens;
  r.train_seconds = s.train_seconds;
  r.tokens_per_s = s.tokens_per_s;
  r.mfu = known(s.mfu);
  r.peak_gflops = known(s.peak_gflops);
  r.final_loss = s.final_loss.value_or(NAN);
  r.final_val_loss = s.final_val_loss;
  r.tp = s.parallel.tp;
  r.dp = s.parallel.dp;
  r.pp = s.parallel.pp;
  r.microbatches = s.parallel.microbatches;
  r.schedule = s.parallel.schedule;
  r.bubble_measured = known(s.bubble_fraction_measured);
  r.bubble_theoretical = known(s.bubble_fraction_theoretical);
  if (const auto& t = s.training) {
    r.mfu_sgemm = t->mfu_sgemm;
    r.peak_gflops_sgemm = t->peak_gflops_sgemm;
    r.peak_source = t->peak_source;
    r.unigram_val_loss = t->unigram_val_loss;
    if (t->straggler) r.straggler = t->straggler->message;
  }
  if (s.lanes) r.lanes = lanes_view(*s.lanes);
  if (s.simulated_lanes) r.lanes = lanes_view(*s.simulated_lanes);
  return r;
}

// "rank 3 (tp 1/2, dp 0/1, pp 1/2)" -> 1; 0 when the name says nothing.
int stage_of_track(const std::string& track) {
  const auto at = track.find("pp ");
  int stage = 0;
  if (at != std::string::npos) std::sscanf(track.c_str() + at, "pp %d", &stage);
  return stage;
}

// One slice of trace.json, in seconds; `args` points into the parsed file.
struct TraceRecord {
  std::string name, cat;
  int tid = 0;
  double ts = 0, dur = 0;
  const json* args = nullptr;
};

// trace.json's slices by track, with the traced steps apart.
struct TraceTracks {
  std::map<int, std::string> names;                             // tid -> track name
  std::map<int, std::vector<TraceRecord>> by_tid;               // every slice but the steps; every rank
  std::map<int, std::vector<std::pair<double, double>>> steps;  // rank -> [ts, ts + dur] by index
  std::map<int, int> step_numbers;                              // index -> training step
  std::string name_of(int tid) const {
    const auto it = names.find(tid);
    return it == names.end() ? "rank " + std::to_string(tid) : it->second;
  }
  const std::vector<TraceRecord>& slices(int rank) const { return by_tid.at(rank); }
};

TraceTracks collect_tracks(const json& events) {
  TraceTracks t;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    const int tid = static_cast<int>(number_or(e, "tid"));
    const std::string ph = e.value("ph", std::string(""));
    const std::string name = e.value("name", std::string(""));
    if (ph == "M") {
      if (name == "thread_name" && e.contains("args")) t.names[tid] = e["args"].value("name", std::string(""));
      continue;
    }
    if (ph != "X") continue;
    TraceRecord ev{name, e.value("cat", std::string("")), tid, number_or(e, "ts") / 1e6, number_or(e, "dur") / 1e6,
                   e.contains("args") ? &e["args"] : nullptr};
    if (ev.cat == "step" && tid < 10000) {
      const int index = ev.args ? static_cast<int>(number_or(*ev.args, "index")) : 0;
      t.by_tid[tid];  // a rank with steps has slices, if none
      auto& v = t.steps[tid];
      if (static_cast<int>(v.size()) <= index) v.resize(index + 1, {0, 0});
      v[index] = {ev.ts, ev.ts + ev.dur};
      if (ev.args && ev.args->contains("step")) t.step_numbers[index] = static_cast<int>(number_or(*ev.args, "step"));
      continue;
    }
    t.by_tid[tid].push_back(ev);
  }
  return t;
}

std::string wait_kind(const TraceRecord& ev) { return ev.args ? ev.args->value("kind", ev.name) : ev.name; }

// One rank's time per step over its traced steps after the first (which pages memory in).
StageTime rank_stage_time(const TraceTracks& tracks, int rank, const std::vector<std::pair<double, double>>& windows) {
  const std::size_t first = windows.size() > 1 ? 1 : 0;
  StageTime t;
  t.stage = stage_of_track(tracks.names.count(rank) ? tracks.names.at(rank) : "");
  double step_total = 0;
  for (std::size_t k = first; k < windows.size(); ++k) step_total += windows[k].second - windows[k].first;
  const double lo = windows[first].first;
  for (const TraceRecord& ev : tracks.slices(rank)) {
    if (ev.ts < lo) continue;
    if (ev.cat == "instr" && (ev.name == "Fwd" || ev.name == "Bwd" || ev.name == "BwdWeight")) t.compute_ms += ev.dur;
    else if (ev.cat == "wait") t.wait_ms[wait_kind(ev)] += ev.dur;
  }
  double waits = 0;
  for (const auto& [kind, w] : t.wait_ms) waits += w;
  t.other_ms = std::max(0.0, step_total - t.compute_ms - waits);
  const double n = static_cast<double>(windows.size() - first) / 1e3;  // seconds -> ms per step
  t.compute_ms /= n;
  t.other_ms /= n;
  for (auto& [kind, w] : t.wait_ms) w /= n;
  return t;
}

// Each stage's time per step, the mean over its ranks.
std::vector<StageTime> stage_times(const TraceTracks& tracks) {
  std::map<int, std::vector<StageTime>> per_stage;
  for (const auto& [rank, windows] : tracks.steps) {
    const StageTime t = rank_stage_time(tracks, rank, windows);
    per_stage[t.stage].push_back(t);
  }
  std::vector<StageTime> out;
  for (const auto& [stage, ranks] : per_stage) {
    StageTime avg;
    avg.stage = stage;
    for (const StageTime& t : ranks) {
      avg.compute_ms += t.compute_ms / ranks.size();
      avg.other_ms += t.other_ms / ranks.size();
      for (const auto& [kind, w] : t.wait_ms) avg.wait_ms[kind] += w / ranks.size();
    }
    out.push_back(avg);
  }
  return out;
}

// Rank `rank`'s slices within its step window [t0, t1], from its own step start.
RankTimeline rank_timeline(const TraceTracks& tracks, int rank, double t0, double t1) {
  RankTimeline rt;
  rt.rank = rank;
  rt.track = tracks.name_of(rank);
  const auto inside = [&](const TraceRecord& ev) { return ev.ts + ev.dur > t0 && ev.ts < t1; };
  const auto slice = [&](const TraceRecord& ev, std::string name) {
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
  for (const TraceRecord& ev : tracks.slices(rank)) {
    if (!inside(ev)) continue;
    if (ev.cat == "instr") rt.instructions.push_back(slice(ev, ev.name));
    else if (ev.cat == "wait") rt.waits.push_back(slice(ev, wait_kind(ev)));
  }
  for (const auto& [tid, evs] : tracks.by_tid) {  // the rank's lane tracks: 10000 + 100 * rank + lane
    if (tid < 10000 || (tid - 10000) / 100 != rank) continue;
    for (const TraceRecord& ev : evs)
      if (ev.cat == "lane" && inside(ev)) rt.lane_steps.push_back(slice(ev, ev.name));
  }
  return rt;
}

// The timeline of one traced step, each rank from its own step start (ranks have their own
// clocks; their steps start together after the previous step's global gradient norm).
IterationTimeline timeline(const TraceTracks& tracks, int traced_step) {
  std::size_t traced = 0;
  for (const auto& [rank, windows] : tracks.steps) traced = std::max(traced, windows.size());
  const int index = traced_step < 0 ? static_cast<int>(traced) - 1 : std::min<int>(traced_step, static_cast<int>(traced) - 1);
  IterationTimeline tl;
  tl.step_index = index;
  tl.step = tracks.step_numbers.count(index) ? tracks.step_numbers.at(index) : 0;
  for (const auto& [rank, windows] : tracks.steps) {
    if (index >= static_cast<int>(windows.size())) continue;
    const auto [t0, t1] = windows[index];
    tl.span_s = std::max(tl.span_s, t1 - t0);
    tl.ranks.push_back(rank_timeline(tracks, rank, t0, t1));
  }
  return tl;
}

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
  const TraceTracks tracks = collect_tracks(*events);
  if (tracks.steps.empty()) {
    run.notes.push_back(path.string() + ": no traced step; no timeline");
    return;
  }
  for (const StageTime& st : stage_times(tracks)) run.stage_times.push_back(st);
  run.timeline = timeline(tracks, traced_step);
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
      run.summary = summary_view(read_run_summary(summary.string()));
    } catch (const SummaryError& e) {
      run.notes.push_back(e.what());
    }
  } else {
    run.notes.push_back("no summary.json: the run has not finished (or failed)");
  }
  if (fs::exists(trace)) read_trace(trace, traced_step, run);
  else run.notes.push_back("no trace.json: no timeline");
  if (fs::exists(fs::path(dir) / "samples.jsonl")) read_samples(fs::path(dir) / "samples.jsonl", run);
  if (std::ifstream config(fs::path(dir) / "config.ini"); config)
    run.config_ini.assign(std::istreambuf_iterator<char>(config), {});
  return run;
}

}  // namespace pipelane::report
