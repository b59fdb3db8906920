#include "trainer/sim/sim_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pipelane {

namespace {

using namespace sim;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p * (v.size() - 1);
  const std::size_t i = std::min(static_cast<std::size_t>(pos), v.size() - 1);
  const std::size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (pos - i) * (v[j] - v[i]);
}

std::map<std::string, double> idle_by_kind(const double (&by_kind)[5]) {
  std::map<std::string, double> out;
  for (int k = 1; k < 5; ++k) out[wait_kind_name(static_cast<WaitKind>(k))] = by_kind[k];
  return out;
}

// One lane over stages first..last, as combine_lane_summaries sums a real run's (every rank of the
// job: each stage's tp x dp ranks).
SimulatedLane lane_totals(const SimulationSetup& setup, const SimulationOutcome& out, std::size_t l, int first,
                          int last) {
  const double ranks = static_cast<double>(setup.job.tp) * setup.job.dp;
  const LaneModel& model = setup.lanes[l];
  SimulatedLane lane;
  for (int s = first; s <= last; ++s) {
    const LaneTotals& t = out.lanes->totals()[s][l];
    lane.units += t.units * ranks;
    lane.lane_s += t.lane_s * ranks;
    lane.harvested_s += t.harvested_s * ranks;
    lane.overrun_s += t.overrun_s * ranks;
    lane.interference_s += t.interference_s * ranks;
    lane.steps += t.steps * ranks;
  }
  lane.work_unit = model.work_unit;
  lane.units_per_lane_s = lane.lane_s > 0 ? lane.units / lane.lane_s : 0.0;
  lane.units_per_train_s = out.on->train_s > 0 ? lane.units / out.on->train_s : 0.0;
  lane.dedicated_units_per_s = model.value_rate_units_per_s();
  lane.value_device_s = lane.units / model.value_rate_units_per_s();
  lane.step_ms_median = model.median_step_s() * 1e3;
  lane.source = model.source;
  lane.kernel_block_ms = model.kernel_block_s * 1e3;
  lane.kernel_block_source = model.kernel_block_source;
  return lane;
}

// The lanes of stages first..last, as a real run's lane totals (sums over every rank of the job).
SimulatedLaneTotals stage_totals(const SimulationSetup& setup, const SimulationOutcome& out, int first, int last) {
  const double ranks = static_cast<double>(setup.job.tp) * setup.job.dp;
  SimulatedLaneTotals t;
  for (std::size_t l = 0; l < setup.lanes.size(); ++l)
    t.lanes[setup.lanes[l].name] = lane_totals(setup, out, l, first, last);
  double bubble_after = 0, harvested_after = 0;
  for (int s = first; s <= last; ++s) {
    const StageReport& st = out.on->stages[s];
    t.bubble_s += st.bubble_s * ranks;
    t.harvested_s += st.harvested_s * ranks;
    t.overrun_s += st.overrun_s * ranks;
    bubble_after += st.bubble_after_profiling_s * ranks;
    harvested_after += st.harvested_after_profiling_s * ranks;
  }
  t.bubble_after_profiling_s = bubble_after;
  t.harvested_after_profiling_s = harvested_after;
  if (!setup.lane_settings.lane_gap_delay_source.empty()) {
    t.lane_gap_delay_ms = setup.lane_settings.lane_gap_delay_s * 1e3;
    t.lane_gap_delay_source = setup.lane_settings.lane_gap_delay_source;
    for (int s = first; s <= last; ++s) {
      t.lane_gap_delay_s += out.lanes->lane_gap_delay_s()[s] * ranks;
      t.lane_gaps += static_cast<long>(out.lanes->lane_gaps()[s] * ranks);
    }
  }
  t.harvest_fraction = t.bubble_s > 0 ? t.harvested_s / t.bubble_s : 0.0;
  t.harvest_fraction_after_profiling = bubble_after > 0 ? harvested_after / bubble_after : 0.0;
  for (int s = first; s <= last; ++s)
    for (std::size_t l = 0; l < setup.lanes.size(); ++l)
      if (out.lanes->totals()[s][l].quarantined)
        t.quarantined.push_back({setup.lanes[l].name, s,
                                 "3 of its last 16 steps took more than 10x the prediction (iteration " +
                                     std::to_string(out.lanes->totals()[s][l].quarantined_at) + ")"});
  return t;
}

SimulatedOverhead overhead(const SimulationOutcome& out) {
  const JobSimReport& on = *out.on;
  return {"the same simulation with lanes off", out.off.train_s, on.train_s, out.overhead,
          out.off.step_s_median * 1e3, on.step_s_median * 1e3,
          out.off.step_s_median > 0 ? on.step_s_median / out.off.step_s_median - 1 : 0.0};
}

SimulatedCostSaving cost_saving(const SimulationSetup& setup, const SimulationOutcome& out) {
  const double world = setup.job.world();
  SimulatedCostSaving c;
  for (std::size_t l = 0; l < setup.lanes.size(); ++l) {
    c.value_device_s += out.values[l].value_device_s;
    c.dedicated_prices[setup.lanes[l].name] = {
        setup.lanes[l].dedicated_device.empty() ? setup.cluster.device.name : setup.lanes[l].dedicated_device,
        out.values[l].price_per_hour, out.values[l].value_usd};
  }
  c.dedicated = "lane step-time models (see lanes[].source)";
  c.training_device_s = world * out.off.train_s;
  c.extra_device_s = world * (out.on->train_s - out.off.train_s);
  c.fraction = out.net_saving;
  c.gross = false;
  c.gross_fraction = out.gross_saving;
  c.net_fraction = out.net_saving;
  c.training_price_per_hour = out.training_price_per_hour;
  c.training_usd = out.training_usd;
  c.extra_usd = out.extra_usd;
  c.value_usd = out.value_usd;
  return c;
}

// Services (prefill in bubbles): time to first token of the requests served.
std::optional<SimulatedRequests> requests(const SimulationSetup& setup, const SimulationOutcome& out) {
  const bool services = std::any_of(setup.lanes.begin(), setup.lanes.end(), [](const LaneModel& l) { return l.requests_per_s > 0; });
  if (!services) return std::nullopt;
  std::vector<double> ttft;
  long unserved = 0;
  for (const SimRequest& r : out.lanes->requests(out.on->train_s)) {
    if (r.done_s >= 0) ttft.push_back(r.done_s - r.arrival_s);
    else ++unserved;
  }
  return SimulatedRequests{ttft.size(), unserved, percentile(ttft, 0.5), percentile(ttft, 0.99),
                           "one replica's stages (every replica serves its own)"};
}

// The lanes part, as combine_lane_summaries / lane_summaries_per_stage / LaneValuation write it
// for a real run.
SimulatedLanes lanes_part(const SimulationSetup& setup, const SimulationOutcome& out) {
  SimulatedLanes lanes;
  lanes.total = stage_totals(setup, out, 0, setup.job.schedule.pp - 1);
  lanes.overhead = overhead(out);
  lanes.cost_saving = cost_saving(setup, out);
  for (int s = 0; s < setup.job.schedule.pp; ++s) {
    SimulatedStageLanes entry{stage_totals(setup, out, s, s), {}};
    for (std::size_t l = 0; l < setup.lanes.size(); ++l)
      if (out.runs_on[s][l]) entry.lanes_running.push_back(setup.lanes[l].name);
    lanes.per_stage.push_back(std::move(entry));
  }
  lanes.requests = requests(setup, out);
  return lanes;
}

// Device utilisation over the iterations after the first: training compute and lane steps over
// every stage's whole iterations (the sync and optimizer tail included).
double utilisation(const JobSimReport& report, const LaneSimulator* lanes, int pp) {
  if (report.iteration_s.size() < 2) return 0.0;
  double busy = 0;
  for (const StageReport& st : report.stages) busy += st.busy_s;
  if (lanes)
    for (const SimLaneStep& step : lanes->steps())
      if (step.iteration > 0) busy += step.end_s - step.start_s;
  const double time = pp * (report.train_s - report.iteration_s[0]);
  return time > 0 ? busy / time : 0.0;
}

SimulationPart simulation_part(const SimulationSetup& setup, const SimulationOutcome& out,
                               const SimulationSources& sources) {
  const JobSimReport& main = out.on ? *out.on : out.off;
  const sim::DeviceSpec& device = setup.cluster.device;
  SimulationPart p;
  p.cluster = setup.cluster.name;
  p.cluster_source = sources.cluster;
  p.device = device.name;
  p.device_description = device.description;
  p.device_memory_bytes = device.memory_bytes;
  p.price_per_device_hour = device.price_per_hour;
  p.price_source = device.price_source;
  p.compute_from = sources.compute;
  p.lanes_from = sources.lanes;
  p.profile_as_measured = out.profile_as_measured;
  p.replicas_identical = out.replicas_identical;
  p.replicas_simulated = 1;
  p.world = setup.job.world();
  p.all_reduce = all_reduce_algorithm_name(setup.all_reduce);
  for (double t : main.iteration_s) p.iteration_ms.push_back(t * 1e3);
  p.utilisation_training_only = utilisation(out.off, nullptr, setup.job.schedule.pp);
  if (out.on) p.utilisation_with_lanes = utilisation(*out.on, out.lanes.get(), setup.job.schedule.pp);
  p.tokens_per_s_lanes_off = out.tokens_per_s;
  return p;
}

}  // namespace

RunSummary simulation_summary(const SimulationSetup& setup, const SimulationOutcome& out,
                              const SimulationSources& sources) {
  const JobSpec& job = setup.job;
  const ScheduleSpec& spec = job.schedule;
  const JobSimReport& main = out.on ? *out.on : out.off;
  const double tokens_per_step = job.tokens_per_iteration();
  const double peak = setup.cluster.device.peak_flops();
  RunSummary summary;
  summary.simulation = simulation_part(setup, out, sources);
  summary.steps = setup.iterations;
  summary.tokens = tokens_per_step * setup.iterations;
  summary.train_seconds = main.train_s;
  summary.step_ms_median = main.step_s_median * 1e3;
  summary.tokens_per_s = main.step_s_median > 0 ? tokens_per_step / main.step_s_median : 0.0;
  summary.flops_per_token = job.model.train_flops_per_token(job.seq_len);
  summary.peak_gflops = peak / 1e9;
  summary.mfu = peak > 0 ? summary.tokens_per_s * summary.flops_per_token / (peak * job.world()) : 0.0;
  summary.parallel = {job.tp, job.dp, spec.pp, schedule_kind_name(spec.kind), spec.virtual_stages, spec.microbatches};
  for (int s = 0; s < spec.pp; ++s) {
    const StageReport& st = main.stages[s];
    summary.stages.push_back({s, st.busy_s, st.idle_s, st.bubble_fraction,
                              SimulatedStage{idle_by_kind(st.idle_by_kind_s), out.stage_memory_bytes[s]}});
  }
  // The mean costs of the passes, as a real run's measured_op_ms (t_b = the full backward).
  double f = 0, b = 0, w = 0;
  for (int s = 0; s < spec.pp; ++s)
    for (int c = 0; c < spec.virtual_stages; ++c) {
      f += out.ops.fwd[s][c];
      b += out.ops.bwd[s][c] + out.ops.bwd_weight[s][c];
      w += out.ops.bwd_weight[s][c];
    }
  const double chunks = static_cast<double>(spec.pp) * spec.virtual_stages;
  summary.bubble_fraction_measured = main.bubble_fraction;
  summary.bubble_fraction_theoretical = theoretical_bubble_fraction(spec, f / chunks, b / chunks, w / chunks);
  summary.measured_op_ms = {f / chunks * 1e3, b / chunks * 1e3, w / chunks * 1e3};
  summary.training_arena_bytes_rank0 = out.stage_memory_bytes[0];
  if (out.on) summary.simulated_lanes = lanes_part(setup, out);
  return summary;
}

std::vector<TraceEvent> simulation_trace_events(const SimulationSetup& setup, const SimulationOutcome& out) {
  const JobSimReport& main = out.on ? *out.on : out.off;
  std::vector<TraceEvent> events;
  const int pp = setup.job.schedule.pp;
  for (int s = 0; s < pp; ++s)
    events.push_back(track_name_event(s, "stage " + std::to_string(s) + " (simulated; every tp/dp rank alike)"));
  std::vector<double> offsets;
  double t = 0;
  for (std::size_t it = 0; it < main.timelines.size(); ++it) {
    offsets.push_back(t);
    t += main.iteration_s[it];
  }
  const auto us = [](double s) { return s * 1e6; };
  // A huge job's trace stays openable: each stage's instructions of each kept iteration up to a
  // share of kMaxEvents (the start of the iteration when it has more), with the waits among them.
  constexpr std::size_t kMaxEvents = 100000;
  const std::size_t kept = main.timelines.size();
  const std::size_t quota = std::max<std::size_t>(1000, kMaxEvents / std::max<std::size_t>(1, kept * pp));
  for (std::size_t it = 0; it < kept; ++it) {
    const SimResult& r = main.timelines[it];
    const double base = offsets[it];
    for (int s = 0; s < pp; ++s) {
      events.push_back({"step", "step", s, us(base), us(r.makespan), {integer_arg("index", static_cast<std::int64_t>(it))}});
      const std::vector<SimEvent>& list = r.stages[s].events;
      const std::size_t shown = std::min(quota, list.size());
      const double cutoff = shown < list.size() ? list[shown].start : r.makespan;
      for (std::size_t k = 0; k < shown; ++k) {
        const SimEvent& e = list[k];
        events.push_back({op_name(e.instr.op), "instr", s, us(base + e.start), us(e.end - e.start),
                          {integer_arg("microbatch", e.instr.microbatch), integer_arg("chunk", e.instr.chunk),
                           integer_arg("index", e.index)}});
      }
      for (const SimIdle& i : r.stages[s].idle)
        if (i.start < cutoff)
          events.push_back({std::string("wait: ") + wait_kind_name(i.kind), "wait", s, us(base + i.start),
                            us(i.end - i.start), {text_arg("kind", wait_kind_name(i.kind)), integer_arg("gap", i.index)}});
    }
  }
  if (!out.lanes) return events;
  const std::size_t n = setup.lanes.size();
  for (int s = 0; s < pp; ++s)
    for (std::size_t l = 0; l < n; ++l)
      if (out.runs_on[s][l])
        events.push_back(track_name_event(10000 + 100 * s + static_cast<int>(l),
                                          "stage " + std::to_string(s) + " lane " + setup.lanes[l].name));
  for (const SimLaneStep& step : out.lanes->steps()) {
    if (step.iteration >= static_cast<int>(kept) || events.size() >= 2 * kMaxEvents) break;
    const double base = offsets[step.iteration];
    events.push_back({setup.lanes[step.lane].name, "lane", 10000 + 100 * step.stage + step.lane,
                      us(base + step.start_s), us(step.end_s - step.start_s),
                      {integer_arg("iteration", step.iteration), integer_arg("gap", step.gap),
                       text_arg("kind", wait_kind_name(step.kind)), number_arg("units", step.units)}});
  }
  return events;
}

}  // namespace pipelane
