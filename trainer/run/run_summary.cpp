// to_json(RunSummary): summary.json's writer (the parser: run_summary_reader.cpp).
#include "trainer/run/run_summary.h"

namespace pipelane {

namespace {

using nlohmann::json;

json optional_number(const std::optional<double>& x) { return x ? json(*x) : json(nullptr); }

json to_json(const TrainingLanes& l) {
  json per_stage = json::array();
  for (std::size_t stage = 0; stage < l.per_stage.size(); ++stage) {
    json entry = valued_lanes_json(l.per_stage[stage].lanes, l.per_stage[stage].values);
    entry["stage"] = stage;
    per_stage.push_back(std::move(entry));
  }
  json per_rank = json::array();
  for (const std::optional<StageLaneSummary>& rank : l.per_rank) per_rank.push_back(rank ? to_json(*rank) : json(nullptr));
  return {{"total", valued_total_json(l.total, l.valuation)}, {"per_stage", per_stage}, {"per_rank", per_rank}};
}

json to_json(const SimulatedLane& l) {
  json j = {{"work_unit", l.work_unit}, {"units", l.units}, {"lane_s", l.lane_s}, {"harvested_s", l.harvested_s},
            {"overrun_s", l.overrun_s}, {"steps", l.steps}, {"units_per_lane_s", l.units_per_lane_s},
            {"units_per_train_s", l.units_per_train_s}, {"dedicated_units_per_s", l.dedicated_units_per_s},
            {"value_device_s", l.value_device_s}, {"step_ms_median", l.step_ms_median}, {"source", l.source}};
  if (l.kernel_block_ms > 0)
    j["interference"] = {{"kernel_block_ms", l.kernel_block_ms}, {"kernel_block_source", l.kernel_block_source},
                         {"delay_per_filled_gap_ms", 0.5 * l.kernel_block_ms}, {"delay_s", l.interference_s}};
  return j;
}

json to_json(const SimulatedLaneTotals& t) {
  json lanes = json::object();
  for (const auto& [name, lane] : t.lanes) lanes[name] = to_json(lane);
  json quarantined = json::array();
  for (const SimulatedQuarantine& q : t.quarantined)
    quarantined.push_back({{"lane", q.lane}, {"stage", q.stage}, {"reason", q.reason}});
  json j = {{"bubble_s", t.bubble_s}, {"harvested_s", t.harvested_s}, {"harvest_fraction", t.harvest_fraction},
            {"overrun_s", t.overrun_s}, {"bubble_after_profiling_s", t.bubble_after_profiling_s},
            {"harvested_after_profiling_s", t.harvested_after_profiling_s},
            {"harvest_fraction_after_profiling", t.harvest_fraction_after_profiling},
            {"lanes", lanes}, {"quarantined", quarantined}};
  if (!t.lane_gap_delay_source.empty())
    j["interference"] = {{"delay_per_lane_gap_ms", t.lane_gap_delay_ms}, {"source", t.lane_gap_delay_source},
                         {"lane_gaps", t.lane_gaps}, {"delay_s", t.lane_gap_delay_s}};
  return j;
}

json to_json(const SimulatedOverhead& o) {
  return {{"baseline", o.baseline}, {"baseline_train_s", o.baseline_train_s}, {"train_s", o.train_s},
          {"fraction", o.fraction}, {"baseline_step_ms_median", o.baseline_step_ms_median},
          {"step_ms_median", o.step_ms_median}, {"step_median_fraction", o.step_median_fraction}};
}

json to_json(const SimulatedCostSaving& c) {
  json prices = json::object();
  for (const auto& [lane, p] : c.dedicated_prices)
    prices[lane] = {{"dedicated_device", p.dedicated_device}, {"price_per_hour", p.price_per_hour},
                    {"value_usd", p.value_usd}};
  return {{"dedicated", c.dedicated}, {"value_device_s", c.value_device_s},
          {"training_device_s", c.training_device_s}, {"extra_device_s", c.extra_device_s},
          {"fraction", c.fraction}, {"gross", c.gross}, {"gross_fraction", c.gross_fraction},
          {"net_fraction", c.net_fraction}, {"training_price_per_hour", c.training_price_per_hour},
          {"training_usd", c.training_usd}, {"extra_usd", c.extra_usd}, {"value_usd", c.value_usd},
          {"dedicated_prices", prices}};
}

json to_json(const SimulatedLanes& l) {
  json total = to_json(l.total);
  total["overhead"] = to_json(l.overhead);
  total["cost_saving"] = to_json(l.cost_saving);
  json per_stage = json::array();
  for (std::size_t stage = 0; stage < l.per_stage.size(); ++stage) {
    json entry = to_json(l.per_stage[stage].totals);
    entry["stage"] = stage;
    entry["lanes_running"] = l.per_stage[stage].lanes_running;
    per_stage.push_back(std::move(entry));
  }
  json out = {{"total", total}, {"per_stage", per_stage}};
  if (const auto& r = l.requests)
    out["requests"] = {{"served", r->served}, {"unserved", r->unserved}, {"ttft_p50_s", r->ttft_p50_s},
                       {"ttft_p99_s", r->ttft_p99_s}, {"per", r->per}};
  return out;
}

json to_json(const StageTime& st) {
  json out = {{"stage", st.stage}, {"busy_s", st.busy_s}, {"idle_s", st.idle_s}, {"bubble_fraction", st.bubble_fraction}};
  if (const auto& sim = st.simulated) {
    out["idle_by_kind_s"] = sim->idle_by_kind_s;
    out["memory_bytes"] = sim->memory_bytes;
  }
  return out;
}

json to_json(const StragglerReport& s) {
  return {{"stage", s.stage >= 0 ? json(s.stage) : json(nullptr)}, {"busy_s", s.busy_s},
          {"others_mean_busy_s", s.others_mean_s}, {"excess_fraction", s.excess},
          {"layers_per_stage", s.layers}, {"suggested_layers_per_stage", s.suggested}, {"message", s.message}};
}

void add_training_part(const TrainingPart& t, json& out) {
  out["first_step"] = t.first_step;
  out["last_step"] = t.last_step;
  out["steps_configured"] = t.steps_configured;
  out["peak_source"] = t.peak_source;
  out["peak_gflops_sgemm"] = optional_number(t.peak_gflops_sgemm);
  out["sgemm_source"] = t.sgemm_source;
  out["mfu_sgemm"] = optional_number(t.mfu_sgemm);
  out["straggler"] = t.straggler ? to_json(*t.straggler) : json(nullptr);
  out["traced_steps"] = t.traced_steps ? json{t.traced_steps->first, t.traced_steps->second} : json(nullptr);
  out["skipped_steps"] = {{"nonfinite", t.skipped_nonfinite}, {"spike", t.skipped_spike}};
  if (t.unigram_val_loss) out["unigram_val_loss"] = *t.unigram_val_loss;
  if (t.config) out["config"] = *t.config;
  if (!t.memory.empty()) {
    json arenas = json::array();
    for (const ArenaMemory& a : t.memory)
      arenas.push_back({{"rank", a.rank}, {"stage", a.stage}, {"tp", a.tp}, {"dp", a.dp},
                        {"predicted_bytes", static_cast<std::uint64_t>(a.predicted_bytes)},
                        {"high_water_bytes", static_cast<std::uint64_t>(a.high_water_bytes)}});
    out["memory"] = arenas;
  }
}

void add_simulation_part(const SimulationPart& s, json& out) {
  out["simulated"] = true;
  out["simulation"] = {
      {"cluster", s.cluster}, {"cluster_source", s.cluster_source}, {"device", s.device},
      {"device_description", s.device_description}, {"device_memory_bytes", s.device_memory_bytes},
      {"price_per_device_hour", s.price_per_device_hour}, {"price_source", s.price_source},
      {"compute_from", s.compute_from}, {"lanes_from", s.lanes_from},
      {"profile_as_measured", s.profile_as_measured}, {"replicas_identical", s.replicas_identical},
      {"replicas_simulated", s.replicas_simulated}, {"world", s.world}, {"all_reduce", s.all_reduce},
      {"iteration_ms", s.iteration_ms}, {"utilisation_training_only", s.utilisation_training_only},
      {"utilisation_with_lanes", optional_number(s.utilisation_with_lanes)},
      {"tokens_per_s_lanes_off", s.tokens_per_s_lanes_off}, {"wall_s", s.wall_s}};
}

}  // namespace

json to_json(const RunSummary& s) {
  json evals = json::array();
  for (const EvalPoint& e : s.evals) evals.push_back({{"step", e.step}, {"val_loss", e.val_loss}});
  json stages = json::array();
  for (const StageTime& st : s.stages) stages.push_back(to_json(st));
  const ParallelShape& p = s.parallel;
  json out = {
      {"steps", s.steps},
      {"tokens", s.tokens},
      {"train_seconds", s.train_seconds},
      {"final_loss", optional_number(s.final_loss)},
      {"final_val_loss", optional_number(s.final_val_loss)},
      {"evals", evals},
      {"step_ms_median", s.step_ms_median},
      {"tokens_per_s", s.tokens_per_s},
      {"flops_per_token", s.flops_per_token},
      {"peak_gflops", s.peak_gflops},
      {"mfu", s.mfu},
      {"parallel", {{"tp", p.tp}, {"dp", p.dp}, {"pp", p.pp}, {"schedule", p.schedule},
                    {"virtual_stages", p.virtual_stages}, {"microbatches", p.microbatches}}},
      {"stages", stages},
      {"bubble_fraction_measured", s.bubble_fraction_measured},
      {"bubble_fraction_theoretical", s.bubble_fraction_theoretical},
      {"measured_op_ms", {{"forward", s.measured_op_ms.forward}, {"backward", s.measured_op_ms.backward},
                          {"backward_weight", s.measured_op_ms.backward_weight}}},
      // A training run counts its arena in bytes; the simulator's memory model in doubles, and
      // its summaries have always said so ("1360896.0").
      {"training_arena_bytes_rank0", s.simulation ? json(s.training_arena_bytes_rank0)
                                                  : json(static_cast<std::uint64_t>(s.training_arena_bytes_rank0))},
      {"resumed_from_step", s.resumed_from_step},
      {"lanes", s.lanes ? to_json(*s.lanes) : s.simulated_lanes ? to_json(*s.simulated_lanes) : json(nullptr)},
  };
  if (s.schema_version >= 2) out["schema_version"] = s.schema_version;  // version 1 had no key
  if (s.training) add_training_part(*s.training, out);
  if (s.simulation) add_simulation_part(*s.simulation, out);
  return out;
}

}  // namespace pipelane
