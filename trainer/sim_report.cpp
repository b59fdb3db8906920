#include "trainer/sim_report.h"

#include <algorithm>
#include <cmath>

namespace pipelane {

namespace {

using nlohmann::json;
using namespace sim;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p * (v.size() - 1);
  const std::size_t i = std::min(static_cast<std::size_t>(pos), v.size() - 1);
  const std::size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (pos - i) * (v[j] - v[i]);
}

json idle_by_kind(const double (&by_kind)[5]) {
  json out = json::object();
  for (int k = 1; k < 5; ++k) out[wait_kind_name(static_cast<WaitKind>(k))] = by_kind[k];
  return out;
}

// The lanes part, as combine_lane_summaries / lane_summaries_per_stage / LaneValuation write it
// for a real run (sums over every rank of the job: each stage's tp x dp ranks).
json lanes_part(const SimulationSetup& setup, const SimulationOutcome& out) {
  const JobSimReport& on = *out.on;
  const LaneSimulator& lanes = *out.lanes;
  const double ranks = static_cast<double>(setup.job.tp) * setup.job.dp;
  const auto stage_entry = [&](int first, int last) {
    double bubble = 0, harvested = 0, overrun = 0, bubble_after = 0, harvested_after = 0;
    json per_lane = json::object();
    for (std::size_t l = 0; l < setup.lanes.size(); ++l) {
      double units = 0, lane_s = 0, h = 0, o = 0, steps = 0;
      for (int s = first; s <= last; ++s) {
        const LaneTotals& t = lanes.totals()[s][l];
        units += t.units * ranks;
        lane_s += t.lane_s * ranks;
        h += t.harvested_s * ranks;
        o += t.overrun_s * ranks;
        steps += t.steps * ranks;
      }
      const LaneModel& model = setup.lanes[l];
      per_lane[model.name] = {{"work_unit", model.work_unit}, {"units", units}, {"lane_s", lane_s},
                              {"harvested_s", h}, {"overrun_s", o}, {"steps", steps},
                              {"units_per_lane_s", lane_s > 0 ? units / lane_s : 0.0},
                              {"units_per_train_s", on.train_s > 0 ? units / on.train_s : 0.0},
                              {"dedicated_units_per_s", model.value_rate_units_per_s()},
                              {"value_device_s", units / model.value_rate_units_per_s()},
                              {"step_ms_median", model.median_step_s() * 1e3},
                              {"source", model.source}};
    }
    for (int s = first; s <= last; ++s) {
      const StageReport& st = on.stages[s];
      bubble += st.bubble_s * ranks;
      harvested += st.harvested_s * ranks;
      overrun += st.overrun_s * ranks;
      bubble_after += st.bubble_after_profiling_s * ranks;
      harvested_after += st.harvested_after_profiling_s * ranks;
    }
    json quarantined = json::array();
    for (int s = first; s <= last; ++s)
      for (std::size_t l = 0; l < setup.lanes.size(); ++l)
        if (lanes.totals()[s][l].quarantined)
          quarantined.push_back({{"lane", setup.lanes[l].name}, {"stage", s},
                                 {"reason", "2 steps in a row took more than 10x the prediction (iteration " +
                                                std::to_string(lanes.totals()[s][l].quarantined_at) + ")"}});
    return json{{"bubble_s", bubble}, {"harvested_s", harvested},
                {"harvest_fraction", bubble > 0 ? harvested / bubble : 0.0}, {"overrun_s", overrun},
                {"bubble_after_profiling_s", bubble_after}, {"harvested_after_profiling_s", harvested_after},
                {"harvest_fraction_after_profiling", bubble_after > 0 ? harvested_after / bubble_after : 0.0},
                {"lanes", per_lane}, {"quarantined", quarantined}};
  };
  json total = stage_entry(0, setup.job.schedule.pp - 1);
  const double world = setup.job.world();
  total["overhead"] = {{"baseline", "the same simulation with lanes off"},
                       {"baseline_train_s", out.off.train_s}, {"train_s", on.train_s},
                       {"fraction", out.overhead},
                       {"baseline_step_ms_median", out.off.step_s_median * 1e3},
                       {"step_ms_median", on.step_s_median * 1e3},
                       {"step_median_fraction", out.off.step_s_median > 0
                                                    ? on.step_s_median / out.off.step_s_median - 1 : 0.0}};
  double value_s = 0;
  json prices = json::object();
  for (std::size_t l = 0; l < setup.lanes.size(); ++l) {
    value_s += out.values[l].value_device_s;
    prices[setup.lanes[l].name] = {{"dedicated_device", setup.lanes[l].dedicated_device.empty()
                                                            ? setup.cluster.device.name : setup.lanes[l].dedicated_device},
                                   {"price_per_hour", out.values[l].price_per_hour},
                                   {"value_usd", out.values[l].value_usd}};
  }
  total["cost_saving"] = {{"dedicated", "lane step-time models (see lanes[].source)"},
                          {"value_device_s", value_s},
                          {"training_device_s", world * out.off.train_s},
                          {"extra_device_s", world * (on.train_s - out.off.train_s)},
                          {"fraction", out.net_saving},
                          {"gross", false},
                          {"gross_fraction", out.gross_saving},
                          {"net_fraction", out.net_saving},
                          {"training_price_per_hour", out.training_price_per_hour},
                          {"training_usd", out.training_usd}, {"extra_usd", out.extra_usd},
                          {"value_usd", out.value_usd}, {"dedicated_prices", prices}};
  json per_stage = json::array();
  for (int s = 0; s < setup.job.schedule.pp; ++s) {
    json entry = stage_entry(s, s);
    entry["stage"] = s;
    json runs = json::array();
    for (std::size_t l = 0; l < setup.lanes.size(); ++l)
      if (out.runs_on[s][l]) runs.push_back(setup.lanes[l].name);
    entry["lanes_running"] = runs;
    per_stage.push_back(entry);
  }
  json result = {{"total", total}, {"per_stage", per_stage}};
  // Services (prefill in bubbles): time to first token of the requests served.
  const bool services = std::any_of(setup.lanes.begin(), setup.lanes.end(), [](const LaneModel& l) { return l.requests_per_s > 0; });
  if (services) {
    std::vector<double> ttft;
    long unserved = 0;
    for (const SimRequest& r : out.lanes->requests(on.train_s)) {
      if (r.done_s >= 0) ttft.push_back(r.done_s - r.arrival_s);
      else ++unserved;
    }
    result["requests"] = {{"served", ttft.size()}, {"unserved", unserved},
                          {"ttft_p50_s", percentile(ttft, 0.5)}, {"ttft_p99_s", percentile(ttft, 0.99)},
                          {"per", "one replica's stages (every replica serves its own)"}};
  }
  return result;
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

}  // namespace

json simulation_summary(const SimulationSetup& setup, const SimulationOutcome& out, const SimulationSources& sources) {
  const JobSpec& job = setup.job;
  const ScheduleSpec& spec = job.schedule;
  const JobSimReport& main = out.on ? *out.on : out.off;
  const double tokens_per_step = job.tokens_per_iteration();
  const double flops_per_token = job.model.train_flops_per_token(job.seq_len);
  const double peak = setup.cluster.device.peak_flops();
  const double tps = main.step_s_median > 0 ? tokens_per_step / main.step_s_median : 0.0;
  json stages = json::array();
  for (int s = 0; s < spec.pp; ++s) {
    const StageReport& st = main.stages[s];
    stages.push_back({{"stage", s}, {"busy_s", st.busy_s}, {"idle_s", st.idle_s},
                      {"bubble_fraction", st.bubble_fraction}, {"idle_by_kind_s", idle_by_kind(st.idle_by_kind_s)},
                      {"memory_bytes", out.stage_memory_bytes[s]}});
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
  json iterations = json::array();
  for (double t : main.iteration_s) iterations.push_back(t * 1e3);
  json summary = {
      {"simulated", true},
      {"simulation",
       {{"cluster", setup.cluster.name}, {"cluster_source", sources.cluster},
        {"device", setup.cluster.device.name}, {"device_description", setup.cluster.device.description},
        {"device_memory_bytes", setup.cluster.device.memory_bytes},
        {"price_per_device_hour", setup.cluster.device.price_per_hour},
        {"price_source", setup.cluster.device.price_source},
        {"compute_from", sources.compute}, {"lanes_from", sources.lanes},
        {"profile_as_measured", out.profile_as_measured},
        {"replicas_identical", out.replicas_identical},
        {"replicas_simulated", 1}, {"world", job.world()},
        {"all_reduce", all_reduce_algorithm_name(setup.all_reduce)},
        {"iteration_ms", iterations},
        {"utilisation_training_only", utilisation(out.off, nullptr, spec.pp)},
        {"utilisation_with_lanes", out.on ? json(utilisation(*out.on, out.lanes.get(), spec.pp)) : json(nullptr)},
        {"tokens_per_s_lanes_off", out.tokens_per_s}}},
      {"steps", setup.iterations},
      {"tokens", tokens_per_step * setup.iterations},
      {"train_seconds", main.train_s},
      {"final_loss", nullptr},
      {"final_val_loss", nullptr},
      {"evals", json::array()},
      {"step_ms_median", main.step_s_median * 1e3},
      {"tokens_per_s", tps},
      {"flops_per_token", flops_per_token},
      {"peak_gflops", peak / 1e9},
      {"mfu", peak > 0 ? tps * flops_per_token / (peak * job.world()) : 0.0},
      {"parallel", {{"tp", job.tp}, {"dp", job.dp}, {"pp", spec.pp}, {"schedule", schedule_kind_name(spec.kind)},
                    {"virtual_stages", spec.virtual_stages}, {"microbatches", spec.microbatches}}},
      {"stages", stages},
      {"bubble_fraction_measured", main.bubble_fraction},
      {"bubble_fraction_theoretical", theoretical_bubble_fraction(spec, f / chunks, b / chunks, w / chunks)},
      {"measured_op_ms", {{"forward", f / chunks * 1e3}, {"backward", b / chunks * 1e3},
                          {"backward_weight", w / chunks * 1e3}}},
      {"training_arena_bytes_rank0", out.stage_memory_bytes[0]},
      {"resumed_from_step", 0},
      {"lanes", out.on ? lanes_part(setup, out) : json(nullptr)},
  };
  return summary;
}

json simulation_trace_events(const SimulationSetup& setup, const SimulationOutcome& out) {
  const JobSimReport& main = out.on ? *out.on : out.off;
  json events = json::array();
  const int pp = setup.job.schedule.pp;
  for (int s = 0; s < pp; ++s)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", s},
                      {"args", {{"name", "stage " + std::to_string(s) + " (simulated; every tp/dp rank alike)"}}}});
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
      events.push_back({{"name", "step"}, {"cat", "step"}, {"ph", "X"}, {"pid", 0}, {"tid", s},
                        {"ts", us(base)}, {"dur", us(r.makespan)}, {"args", {{"index", it}}}});
      const std::vector<SimEvent>& list = r.stages[s].events;
      const std::size_t shown = std::min(quota, list.size());
      const double cutoff = shown < list.size() ? list[shown].start : r.makespan;
      for (std::size_t k = 0; k < shown; ++k) {
        const SimEvent& e = list[k];
        events.push_back({{"name", op_name(e.instr.op)}, {"cat", "instr"}, {"ph", "X"}, {"pid", 0}, {"tid", s},
                          {"ts", us(base + e.start)}, {"dur", us(e.end - e.start)},
                          {"args", {{"microbatch", e.instr.microbatch}, {"chunk", e.instr.chunk}, {"index", e.index}}}});
      }
      for (const SimIdle& i : r.stages[s].idle)
        if (i.start < cutoff)
          events.push_back({{"name", std::string("wait: ") + wait_kind_name(i.kind)}, {"cat", "wait"}, {"ph", "X"},
                            {"pid", 0}, {"tid", s}, {"ts", us(base + i.start)}, {"dur", us(i.end - i.start)},
                            {"args", {{"kind", wait_kind_name(i.kind)}, {"gap", i.index}}}});
    }
  }
  if (out.lanes) {
    const std::size_t n = setup.lanes.size();
    for (int s = 0; s < pp; ++s)
      for (std::size_t l = 0; l < n; ++l)
        if (out.runs_on[s][l])
          events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0},
                            {"tid", 10000 + 100 * s + static_cast<int>(l)},
                            {"args", {{"name", "stage " + std::to_string(s) + " lane " + setup.lanes[l].name}}}});
    for (const SimLaneStep& step : out.lanes->steps()) {
      if (step.iteration >= static_cast<int>(kept) || events.size() >= 2 * kMaxEvents) break;
      const double base = offsets[step.iteration];
      events.push_back({{"name", setup.lanes[step.lane].name}, {"cat", "lane"}, {"ph", "X"}, {"pid", 0},
                        {"tid", 10000 + 100 * step.stage + step.lane}, {"ts", us(base + step.start_s)},
                        {"dur", us(step.end_s - step.start_s)},
                        {"args", {{"iteration", step.iteration}, {"gap", step.gap}, {"kind", wait_kind_name(step.kind)},
                                  {"units", step.units}}}});
    }
  }
  return events;
}

}  // namespace pipelane
