#include "trainer/sim_run_trace.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "parallel/rank_grid.h"
#include "parallel/sim/distribution.h"
#include "trainer/sim_inputs.h"

namespace pipelane {

namespace {

using nlohmann::json;

// Means, not medians: an iteration is a sum of many instructions, so its typical length is the
// sum of their means (a loaded machine's preemptions included), as the run's own
// measured_op_ms are means.
double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / v.size();
}

}  // namespace


// What a waiting rank takes to go on once its message was sent: over the traced receives that
// waited from before their message was sent (on the neighbour: same tp and dp coordinates, same
// step; from the second step on; none with lane steps in them, which end at a poll after a step),
// the mean time from the send to the wait's end. Each rank's trace has its own clock (its origin
// is taken after a barrier, which a busy machine can delay by milliseconds), so neighbouring
// stages' clocks are first aligned the way NTP does it: with the quickest message each way,
// offset = (forward - backward) / 2.
namespace {

std::vector<double> measure_wake(const json& events, const sim::JobSpec& job) {
  const ScheduleSpec& spec = job.schedule;
  const RankGrid grid({job.tp, job.dp, spec.pp});
  std::map<int, std::vector<double>> step_starts;  // tid -> its steps' start times (us), ascending
  for (const json& e : events)
    if (e.value("cat", "") == "step") step_starts[e.value("tid", -1)].push_back(e.value("ts", 0.0));
  for (auto& [tid, starts] : step_starts) std::sort(starts.begin(), starts.end());
  const auto step_of = [&](int tid, double ts) {
    const std::vector<double>& starts = step_starts[tid];
    return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), ts) - starts.begin()) - 1;
  };
  using MessageKey = std::tuple<int, int, int, int, int, int, int>;  // dp, tp, step, dir, to stage, to chunk, mb
  std::map<MessageKey, std::pair<int, double>> sent;                 // -> sender rank, send time
  for (const json& e : events) {
    const std::string op = e.value("name", "");
    if (e.value("cat", "") != "instr" || (op != "SendFwd" && op != "SendBwd")) continue;
    const int tid = e.value("tid", -1);
    if (tid < 0 || tid >= job.world() || !e.contains("args")) continue;
    const RankCoords at = grid.coords(tid);
    const int chunk = e["args"].value("chunk", 0), mb = e["args"].value("microbatch", 0);
    const StageChunk to = op == "SendFwd" ? next_virtual_stage(spec, at.pp, chunk) : prev_virtual_stage(spec, at.pp, chunk);
    sent[{at.dp, at.tp, step_of(tid, e.value("ts", 0.0)), op == "SendFwd" ? 0 : 1, to.stage, to.chunk, mb}] = {
        tid, e.value("ts", 0.0)};
  }
  std::map<int, std::vector<double>> lane_starts;  // rank -> its lane steps' start times (us)
  for (const json& e : events)
    if (e.value("cat", "") == "lane") lane_starts[(e.value("tid", 10000) - 10000) / 100].push_back(e.value("ts", 0.0));
  for (auto& [rank, starts] : lane_starts) std::sort(starts.begin(), starts.end());
  const auto lanes_ran = [&](int rank, double from, double to) {
    const std::vector<double>& starts = lane_starts[rank];
    const auto first = std::lower_bound(starts.begin(), starts.end(), from);
    return first != starts.end() && *first < to;
  };
  struct Waited {
    int from, to;
    double sent, start, end;
  };
  std::vector<Waited> waits;
  std::map<std::pair<int, int>, double> quickest;  // (from rank, to rank) -> least end - sent (us)
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
    if (it == sent.end()) continue;
    const double start = e.value("ts", 0.0), end = start + e.value("dur", 0.0);
    const Waited w{it->second.first, tid, it->second.second, start, end};
    const auto [q, fresh] = quickest.emplace(std::make_pair(w.from, w.to), end - w.sent);
    if (!fresh) q->second = std::min(q->second, end - w.sent);
    if (!lanes_ran(tid, start, end)) waits.push_back(w);
  }
  // Clock offsets along each pipeline (stage 0's clock is the reference).
  std::vector<double> offset(job.world(), 0.0);
  for (int dp = 0; dp < job.dp; ++dp)
    for (int tp = 0; tp < job.tp; ++tp)
      for (int s = 0; s + 1 < spec.pp; ++s) {
        const int a = grid.rank_of({tp, dp, s}), b = grid.rank_of({tp, dp, s + 1});
        const auto fwd = quickest.find({a, b}), bwd = quickest.find({b, a});
        const double pair = fwd != quickest.end() && bwd != quickest.end() ? (fwd->second - bwd->second) / 2 : 0.0;
        offset[b] = offset[a] + pair;
      }
  std::vector<double> samples;
  for (const Waited& w : waits) {
    const double sent_at = w.sent - offset[w.from], start = w.start - offset[w.to], end = w.end - offset[w.to];
    if (start <= sent_at && end >= sent_at) samples.push_back((end - sent_at) * 1e-6);
  }
  return sim::equally_likely(samples);
}

}  // namespace

TraceDigest digest_run_trace(const json& trace, const sim::JobSpec& job, const std::string& path) {
  const ScheduleSpec& spec = job.schedule;
  const RankGrid grid({job.tp, job.dp, spec.pp});
  const int v = spec.virtual_stages;
  using Samples = std::vector<std::vector<std::vector<double>>>;  // [stage][chunk] -> seconds
  Samples fwd(spec.pp, std::vector<std::vector<double>>(v)), bwd = fwd, weight = fwd;
  std::vector<std::vector<double>> opt(spec.pp), sync(spec.pp), send(spec.pp), recv(spec.pp);
  std::map<int, double> first_step_end;  // tid -> end of its step 0 (us)
  std::map<std::pair<int, long long>, double> waited;  // (tid, end in us) -> its wait (us)
  TraceDigest d;
  if (!trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw SimInputError(path + ": expected a Chrome trace with traceEvents");
  const json& events = trace["traceEvents"];
  for (const json& e : events) {
    const std::string cat = e.value("cat", "");
    if (cat == "step" && e.contains("args") && e["args"].value("index", -1) == 0)
      first_step_end[e.value("tid", -1)] = e.value("ts", 0.0) + e.value("dur", 0.0);
    if (cat == "wait")  // ends with the instruction that waited
      waited[{e.value("tid", -1), std::llround(e.value("ts", 0.0) + e.value("dur", 0.0))}] = e.value("dur", 0.0);
    if (cat == "lane") {
      const std::string lane = e.value("name", "");
      d.lane_step_s[lane].push_back(e.value("dur", 0.0) * 1e-6);
      d.lane_units[lane] += e.contains("args") ? e["args"].value("units", 0.0) : 0.0;
    }
  }
  d.wake_samples = measure_wake(events, job);

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
    else if (op == "SendFwd" || op == "SendBwd") send[stage].push_back(s);
    else if ((op == "RecvFwd" || op == "RecvBwd") && !waited.count({tid, std::llround(ts + dur)})) recv[stage].push_back(s);
    else if (op == "GradSync") {
      const auto w = waited.find({tid, std::llround(ts + dur)});
      sync[stage].push_back(std::max(0.0, dur - (w == waited.end() ? 0.0 : w->second)) * 1e-6);
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
  t.fwd_samples.assign(spec.pp, std::vector<std::vector<double>>(v));
  t.bwd_samples = t.bwd_weight_samples = t.fwd_samples;
  for (int s = 0; s < spec.pp; ++s) {
    for (int c = 0; c < v; ++c) {
      if (fwd[s][c].empty() || bwd[s][c].empty())
        throw SimInputError(path + ": no traced Fwd/Bwd of stage " + std::to_string(s) + " chunk " + std::to_string(c) +
                            " after the first step (run more steps)");
      t.fwd[s][c] = mean(fwd[s][c]);
      t.bwd[s][c] = mean(bwd[s][c]);
      t.bwd_weight[s][c] = mean(weight[s][c]);
      t.fwd_samples[s][c] = sim::equally_likely(fwd[s][c]);
      t.bwd_samples[s][c] = sim::equally_likely(bwd[s][c]);
      t.bwd_weight_samples[s][c] = sim::equally_likely(weight[s][c]);
    }
    t.optimizer.push_back(mean(opt[s]));
    t.sync.push_back(mean(sync[s]));
    t.optimizer_samples.push_back(sim::equally_likely(opt[s]));
    t.sync_samples.push_back(sim::equally_likely(sync[s]));
    t.send.push_back(mean(send[s]));
    t.recv.push_back(mean(recv[s]));
  }
  d.ops = t;
  return d;
}


}  // namespace pipelane
