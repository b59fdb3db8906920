#include "trainer/sim/run_trace.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "parallel/rank_grid.h"
#include "parallel/sim/distribution.h"
#include "trainer/sim/sim_inputs.h"

namespace pipelane {

namespace {

using nlohmann::json;

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / v.size();
}

std::optional<Op> op_named(const std::string& name) {
  for (Op op : {Op::RecvFwd, Op::Fwd, Op::SendFwd, Op::RecvBwd, Op::Bwd, Op::BwdWeight, Op::SendBwd, Op::GradSync,
                Op::OptimizerStep})
    if (name == op_name(op)) return op;
  return std::nullopt;
}

// Which of its rank's steps an event falls in: each rank's steps by start time (its own clock).
class StepIndex {
 public:
  explicit StepIndex(const json& events) {
    for (const json& e : events)
      if (e.value("cat", "") == "step") starts_[e.value("tid", -1)].push_back(e.value("ts", 0.0));
    for (auto& [tid, starts] : starts_) std::sort(starts.begin(), starts.end());
  }
  int of(int tid, double ts) const {
    const auto it = starts_.find(tid);
    if (it == starts_.end()) return -1;
    return static_cast<int>(std::upper_bound(it->second.begin(), it->second.end(), ts) - it->second.begin()) - 1;
  }

 private:
  std::map<int, std::vector<double>> starts_;
};

// What a waiting rank takes to go on once its message was sent, by step: over the traced receives
// that waited from before their message was sent (on the neighbour: same tp and dp coordinates,
// same step; from the second step on; none with lane steps in them, which end at a poll after a
// step), the time from the send to the wait's end. Each rank's trace has its own clock (its origin
// is taken after a barrier, which a busy machine can delay by milliseconds), so neighbouring
// stages' clocks are first aligned the way NTP does it: with the quickest message each way,
// offset = (forward - backward) / 2.
std::map<int, std::vector<double>> measure_wake(const json& events, const sim::JobSpec& job, const StepIndex& steps) {
  const ScheduleSpec& spec = job.schedule;
  const RankGrid grid({job.tp, job.dp, spec.pp});
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
    sent[{at.dp, at.tp, steps.of(tid, e.value("ts", 0.0)), op == "SendFwd" ? 0 : 1, to.stage, to.chunk, mb}] = {
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
    int from, to, step;
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
    const int step = steps.of(tid, e.value("ts", 0.0));
    if (step < 1) continue;
    const auto it = sent.find({at.dp, at.tp, step, op == "RecvFwd" ? 0 : 1, at.pp, e["args"].value("chunk", 0),
                               e["args"].value("microbatch", 0)});
    if (it == sent.end()) continue;
    const double start = e.value("ts", 0.0), end = start + e.value("dur", 0.0);
    const Waited w{it->second.first, tid, step, it->second.second, start, end};
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
  std::map<int, std::vector<double>> by_step;
  for (const Waited& w : waits) {
    const double sent_at = w.sent - offset[w.from], start = w.start - offset[w.to], end = w.end - offset[w.to];
    if (start <= sent_at && end >= sent_at) by_step[w.step].push_back((end - sent_at) * 1e-6);
  }
  return by_step;
}

// Each wait's duration, by the instruction it ends with: (tid, end in us) -> its wait (us). The
// lanes' traced steps go into the digest on the way.
using WaitIndex = std::map<std::pair<int, long long>, double>;
WaitIndex index_waits_and_lane_steps(const json& events, TraceDigest& d) {
  WaitIndex waited;
  for (const json& e : events) {
    const std::string cat = e.value("cat", "");
    if (cat == "wait")  // ends with the instruction that waited
      waited[{e.value("tid", -1), std::llround(e.value("ts", 0.0) + e.value("dur", 0.0))}] = e.value("dur", 0.0);
    if (cat == "lane") {
      const std::string lane = e.value("name", "");
      d.lane_step_s[lane].push_back(e.value("dur", 0.0) * 1e-6);
      d.lane_units[lane] += e.contains("args") ? e["args"].value("units", 0.0) : 0.0;
    }
  }
  return waited;
}

// Every instruction's own time (less its wait) of every step but the first (it pages memory in):
// by op, stage and chunk, and by step; several ranks of one stage (tp, dp) are averaged.
struct OpSamples {
  using Key = sim::TracedStep::Key;
  using Samples = std::vector<std::vector<std::vector<double>>>;  // [stage][chunk] -> seconds
  Samples fwd, bwd, weight;
  std::vector<std::vector<double>> opt, sync, send, recv;
  std::map<int, std::map<Key, std::pair<double, int>>> by_step;  // step -> key -> (sum, count)

  OpSamples(int pp, int v)
      : fwd(pp, std::vector<std::vector<double>>(v)), bwd(fwd), weight(fwd), opt(pp), sync(pp), send(pp), recv(pp) {}

  void collect(const json& events, const sim::JobSpec& job, const RankGrid& grid, const StepIndex& steps,
               const WaitIndex& waited) {
    const int v = job.schedule.virtual_stages;
    for (const json& e : events) {
      if (e.value("cat", "") != "instr") continue;
      const int tid = e.value("tid", -1);
      const std::optional<Op> op = op_named(e.value("name", ""));
      if (tid < 0 || tid >= job.world() || !op) continue;
      const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
      const int step = steps.of(tid, ts);
      if (step < 1) continue;
      const int stage = grid.coords(tid).pp;
      const int chunk = e.contains("args") ? e["args"].value("chunk", 0) : 0;
      const int mb = e.contains("args") ? e["args"].value("microbatch", -1) : -1;
      if (chunk < 0 || chunk >= v) continue;
      const auto w = waited.find({tid, std::llround(ts + dur)});
      const double own = std::max(0.0, dur - (w == waited.end() ? 0.0 : w->second)) * 1e-6;  // not waiting
      switch (*op) {
        case Op::Fwd: fwd[stage][chunk].push_back(own); break;
        case Op::Bwd: bwd[stage][chunk].push_back(own); break;
        case Op::BwdWeight: weight[stage][chunk].push_back(own); break;
        case Op::OptimizerStep: opt[stage].push_back(own); break;
        case Op::SendFwd:
        case Op::SendBwd: send[stage].push_back(own); break;
        case Op::RecvFwd:
        case Op::RecvBwd:
          if (w == waited.end()) recv[stage].push_back(own);  // a receive whose data was there
          continue;  // the simulator predicts receives' waits: not replayed
        case Op::GradSync: sync[stage].push_back(own); break;
      }
      auto& [sum, count] = by_step[step][{stage, *op, mb, chunk}];
      sum += own;
      ++count;
    }
  }

  // The means per op, and every traced step as it ran (with its wake-up samples).
  sim::OpTable op_table(int pp, int v, const std::map<int, std::vector<double>>& wake, const std::string& path) const {
    sim::OpTable t;
    t.fwd.assign(pp, std::vector<double>(v, 0.0));
    t.bwd = t.fwd;
    t.bwd_weight = t.fwd;
    for (int s = 0; s < pp; ++s) {
      for (int c = 0; c < v; ++c) {
        if (fwd[s][c].empty() || bwd[s][c].empty())
          throw SimInputError(path + ": no traced Fwd/Bwd of stage " + std::to_string(s) + " chunk " +
                              std::to_string(c) + " after the first step (run more steps)");
        t.fwd[s][c] = mean(fwd[s][c]);
        t.bwd[s][c] = mean(bwd[s][c]);
        t.bwd_weight[s][c] = mean(weight[s][c]);
      }
      t.optimizer.push_back(mean(opt[s]));
      t.sync.push_back(mean(sync[s]));
      t.send.push_back(mean(send[s]));
      t.recv.push_back(mean(recv[s]));
    }
    for (const auto& [step, entries] : by_step) {
      sim::TracedStep traced;
      for (const auto& [key, sum_count] : entries) traced.seconds[key] = sum_count.first / sum_count.second;
      const auto w = wake.find(step);
      if (w != wake.end()) traced.wake = sim::equally_likely(w->second);
      t.traced_steps.push_back(std::move(traced));
    }
    return t;
  }
};

}  // namespace

TraceDigest digest_run_trace(const json& trace, const sim::JobSpec& job, const std::string& path) {
  const ScheduleSpec& spec = job.schedule;
  const RankGrid grid({job.tp, job.dp, spec.pp});
  if (!trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw SimInputError(path + ": expected a Chrome trace with traceEvents");
  const json& events = trace["traceEvents"];
  const StepIndex steps(events);
  TraceDigest d;
  const WaitIndex waited = index_waits_and_lane_steps(events, d);
  OpSamples samples(spec.pp, spec.virtual_stages);
  samples.collect(events, job, grid, steps, waited);
  const std::map<int, std::vector<double>> wake = measure_wake(events, job, steps);
  for (const auto& [step, samples_of_step] : wake)
    d.wake_samples.insert(d.wake_samples.end(), samples_of_step.begin(), samples_of_step.end());
  d.wake_samples = sim::equally_likely(d.wake_samples);
  if (samples.by_step.empty()) return d;
  d.ops = samples.op_table(spec.pp, spec.virtual_stages, wake, path);
  return d;
}

}  // namespace pipelane
