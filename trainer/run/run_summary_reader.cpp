// summary.json's one parser (the writer: run_summary.cpp). Every value is read through a Field,
// which knows the file and the key path it sits at, so whatever does not read is one line naming
// both. Values to_json derives from others (fractions, rates) are not read back: they follow
// from the values they are derived from, bit for bit.
#include <cstdint>
#include <fstream>
#include <limits>

#include "trainer/run/run_summary.h"

namespace pipelane {

namespace {

using nlohmann::json;

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a fractional number";
    default: return "a number";
  }
}

// One JSON value of the summary, with where it is.
class Field {
 public:
  Field(const json& value, std::string key, const std::string& where) : value_(value), key_(std::move(key)), where_(where) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw SummaryError(where_ + ": cannot read '" + key_ + "': " + what);
  }
  const json& raw() const { return value_; }
  bool is_null() const { return value_.is_null(); }

  // A member that must be there (its value may be null).
  Field at(const char* name) const {
    const json& object = as_object();
    const auto it = object.find(name);
    if (it == object.end()) Field(value_, child(name), where_).fail("missing");
    return Field(*it, child(name), where_);
  }
  bool has(const char* name) const { return as_object().contains(name); }
  // A member that may be absent or null.
  std::optional<Field> find(const char* name) const {
    const json& object = as_object();
    const auto it = object.find(name);
    if (it == object.end() || it->is_null()) return std::nullopt;
    return Field(*it, child(name), where_);
  }
  std::vector<Field> elements() const {
    if (!value_.is_array()) fail(std::string(type_name(value_)) + ", not a list");
    std::vector<Field> out;
    for (std::size_t i = 0; i < value_.size(); ++i) out.emplace_back(value_[i], key_ + "[" + std::to_string(i) + "]", where_);
    return out;
  }
  std::vector<std::pair<std::string, Field>> members() const {
    std::vector<std::pair<std::string, Field>> out;
    for (const auto& [name, v] : as_object().items()) out.emplace_back(name, Field(v, child(name.c_str()), where_));
    return out;
  }

  // nlohmann::json writes NaN and the infinities as null: null reads back as NaN, which writes null again.
  double number() const {
    if (value_.is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!value_.is_number()) fail(std::string(type_name(value_)) + ", not a number");
    return value_.get<double>();
  }
  std::optional<double> optional_number() const { return value_.is_null() ? std::nullopt : std::optional<double>(number()); }
  std::int64_t int64() const {
    if (!value_.is_number_integer()) fail(std::string(type_name(value_)) + ", not an integer");
    if (value_.is_number_unsigned() && value_.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail("out of range");
    return value_.get<std::int64_t>();
  }
  int integer() const {
    const std::int64_t v = int64();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) fail("out of range");
    return static_cast<int>(v);
  }
  std::uint64_t uint64() const {
    if (!value_.is_number_unsigned()) fail(std::string(type_name(value_)) + ", not a count");
    return value_.get<std::uint64_t>();
  }
  bool boolean() const {
    if (!value_.is_boolean()) fail(std::string(type_name(value_)) + ", not true or false");
    return value_.get<bool>();
  }
  std::string text() const {
    if (!value_.is_string()) fail(std::string(type_name(value_)) + ", not a string");
    return value_.get<std::string>();
  }

 private:
  const json& as_object() const {
    if (!value_.is_object()) fail(std::string(type_name(value_)) + ", not an object");
    return value_;
  }
  std::string child(const char* name) const { return key_.empty() ? name : key_ + "." + name; }

  const json& value_;
  std::string key_;
  const std::string& where_;
};

double number_at(const Field& f, const char* name) { return f.at(name).number(); }
std::optional<double> optional_number_at(const Field& f, const char* name) { return f.at(name).optional_number(); }
int integer_at(const Field& f, const char* name) { return f.at(name).integer(); }
std::string text_at(const Field& f, const char* name) { return f.at(name).text(); }

std::vector<int> integers(const Field& f) {
  std::vector<int> out;
  for (const Field& e : f.elements()) out.push_back(e.integer());
  return out;
}

// --- A training run's lanes ---

CombinedLaneSummary combined_lanes(const Field& f) {
  CombinedLaneSummary c;
  c.bubble_s = number_at(f, "bubble_s");
  c.harvested_s = number_at(f, "harvested_s");
  c.overrun_s = number_at(f, "overrun_s");
  c.bubble_after_profiling_s = number_at(f, "bubble_after_profiling_s");
  c.harvested_after_profiling_s = number_at(f, "harvested_after_profiling_s");
  for (const auto& [name, l] : f.at("lanes").members()) {
    LaneTotal& t = c.lanes[name];
    if (const auto unit = l.find("work_unit")) t.work_unit = unit->text();  // absent when the lane named none
    t.units = number_at(l, "units");
    t.steps = l.at("steps").int64();
    t.lane_s = number_at(l, "lane_s");
    t.calibration_units = number_at(l, "calibration_units");
    t.harvested_s = number_at(l, "harvested_s");
    t.overrun_s = number_at(l, "overrun_s");
  }
  for (const Field& q : f.at("quarantined").elements())
    c.quarantined.push_back({text_at(q, "lane"), integer_at(q, "rank"), text_at(q, "reason")});
  if (const auto interference = f.find("interference")) {  // absent in summaries from before it
    try {
      c.interference = interference_estimate_from_json(interference->raw());
    } catch (const std::invalid_argument& e) {
      interference->fail(e.what());
    }
  }
  return c;
}

std::map<std::string, LaneValue> lane_values(const Field& f) {
  std::map<std::string, LaneValue> values;
  for (const auto& [name, l] : f.at("lanes").members()) {
    LaneValue& v = values[name];
    v.units_per_train_s = number_at(l, "units_per_train_s");
    v.dedicated_units_per_s = optional_number_at(l, "dedicated_units_per_s");
    v.value_device_s = optional_number_at(l, "value_device_s");
  }
  return values;
}

// `combined`: the total as read; `train_seconds` and `replicas_per_stage` are the run's, from which
// the estimated overhead was derived.
LanesValuation valuation(const Field& total, const CombinedLaneSummary& combined, double train_seconds,
                         int replicas_per_stage) {
  LanesValuation v;
  v.lanes = lane_values(total);
  v.estimated_overhead = estimate_overhead(combined, train_seconds, replicas_per_stage);
  if (const auto o = total.at("overhead"); !o.is_null()) {
    v.overhead = TrainingOverhead{text_at(o, "baseline"), number_at(o, "baseline_train_s"), number_at(o, "train_s"),
                                  number_at(o, "baseline_step_ms_median"), number_at(o, "step_ms_median"),
                                  std::nullopt, std::nullopt};
    const auto quartiles = [&o](const std::string& prefix) -> std::optional<StepQuartiles> {
      if (!o.has((prefix + "step_ms_p25").c_str())) return std::nullopt;
      return StepQuartiles{number_at(o, (prefix + "step_ms_p25").c_str()), number_at(o, (prefix + "step_ms_p75").c_str())};
    };
    v.overhead->baseline_step_quartiles = quartiles("baseline_");
    v.overhead->step_quartiles = quartiles("");
  }
  if (const auto c = total.at("cost_saving"); !c.is_null()) {
    CostSaving s;
    s.dedicated = text_at(c, "dedicated");
    s.value_device_s = number_at(c, "value_device_s");
    s.training_device_s = number_at(c, "training_device_s");
    s.extra_device_s = optional_number_at(c, "extra_device_s");
    s.train_price_per_hour = optional_number_at(c, "train_price_per_hour");
    s.dedicated_price_per_hour = optional_number_at(c, "dedicated_price_per_hour");
    s.price_ratio = number_at(c, "price_ratio");
    if (const auto estimated = c.find("estimated")) s.estimated = estimated->boolean();
    v.cost_saving = s;
  }
  return v;
}

TrainingLanes training_lanes(const Field& f, double train_seconds, int replicas_per_stage) {
  TrainingLanes l;
  const Field total = f.at("total");
  l.total = combined_lanes(total);
  l.valuation = valuation(total, l.total, train_seconds, replicas_per_stage);
  const std::vector<Field> stages = f.at("per_stage").elements();
  for (std::size_t stage = 0; stage < stages.size(); ++stage) {
    if (integer_at(stages[stage], "stage") != static_cast<int>(stage)) stages[stage].at("stage").fail("not its place in the list");
    l.per_stage.push_back({combined_lanes(stages[stage]), lane_values(stages[stage])});
  }
  for (const Field& rank : f.at("per_rank").elements()) {
    if (rank.is_null()) {
      l.per_rank.emplace_back();
      continue;
    }
    try {
      l.per_rank.push_back(stage_lane_summary_from_json(rank.raw()));
    } catch (const std::invalid_argument& e) {
      rank.fail(e.what());
    }
  }
  return l;
}

// --- A simulation's lanes ---

SimulatedLaneTotals simulated_totals(const Field& f) {
  SimulatedLaneTotals t;
  t.bubble_s = number_at(f, "bubble_s");
  t.harvested_s = number_at(f, "harvested_s");
  t.harvest_fraction = number_at(f, "harvest_fraction");
  t.overrun_s = number_at(f, "overrun_s");
  t.bubble_after_profiling_s = number_at(f, "bubble_after_profiling_s");
  t.harvested_after_profiling_s = number_at(f, "harvested_after_profiling_s");
  t.harvest_fraction_after_profiling = number_at(f, "harvest_fraction_after_profiling");
  for (const auto& [name, l] : f.at("lanes").members())
    t.lanes[name] = {text_at(l, "work_unit"), number_at(l, "units"), number_at(l, "lane_s"),
                     number_at(l, "harvested_s"), number_at(l, "overrun_s"), number_at(l, "steps"),
                     number_at(l, "units_per_lane_s"), number_at(l, "units_per_train_s"),
                     number_at(l, "dedicated_units_per_s"), number_at(l, "value_device_s"),
                     number_at(l, "step_ms_median"), text_at(l, "source")};
  for (const Field& q : f.at("quarantined").elements())
    t.quarantined.push_back({text_at(q, "lane"), integer_at(q, "stage"), text_at(q, "reason")});
  return t;
}

SimulatedCostSaving simulated_cost_saving(const Field& c) {
  SimulatedCostSaving s;
  s.dedicated = text_at(c, "dedicated");
  s.value_device_s = number_at(c, "value_device_s");
  s.training_device_s = number_at(c, "training_device_s");
  s.extra_device_s = number_at(c, "extra_device_s");
  s.fraction = number_at(c, "fraction");
  s.gross_fraction = number_at(c, "gross_fraction");
  s.net_fraction = number_at(c, "net_fraction");
  s.gross = c.at("gross").boolean();
  s.training_price_per_hour = number_at(c, "training_price_per_hour");
  s.training_usd = number_at(c, "training_usd");
  s.extra_usd = number_at(c, "extra_usd");
  s.value_usd = number_at(c, "value_usd");
  for (const auto& [lane, p] : c.at("dedicated_prices").members())
    s.dedicated_prices[lane] = {text_at(p, "dedicated_device"), number_at(p, "price_per_hour"), number_at(p, "value_usd")};
  return s;
}

SimulatedLanes simulated_lanes(const Field& f) {
  SimulatedLanes l;
  const Field total = f.at("total");
  l.total = simulated_totals(total);
  const Field o = total.at("overhead");
  l.overhead = {text_at(o, "baseline"), number_at(o, "baseline_train_s"), number_at(o, "train_s"),
                number_at(o, "fraction"), number_at(o, "baseline_step_ms_median"), number_at(o, "step_ms_median"),
                number_at(o, "step_median_fraction")};
  l.cost_saving = simulated_cost_saving(total.at("cost_saving"));
  const std::vector<Field> stages = f.at("per_stage").elements();
  for (std::size_t stage = 0; stage < stages.size(); ++stage) {
    if (integer_at(stages[stage], "stage") != static_cast<int>(stage)) stages[stage].at("stage").fail("not its place in the list");
    SimulatedStageLanes entry{simulated_totals(stages[stage]), {}};
    for (const Field& name : stages[stage].at("lanes_running").elements()) entry.lanes_running.push_back(name.text());
    l.per_stage.push_back(std::move(entry));
  }
  if (const auto r = f.find("requests"))
    l.requests = SimulatedRequests{r->at("served").uint64(), r->at("unserved").int64(), number_at(*r, "ttft_p50_s"),
                                   number_at(*r, "ttft_p99_s"), text_at(*r, "per")};
  return l;
}

// --- The parts of a summary ---

TrainingPart training_part(const Field& s) {
  TrainingPart t;
  t.first_step = integer_at(s, "first_step");
  t.last_step = integer_at(s, "last_step");
  t.steps_configured = integer_at(s, "steps_configured");
  t.peak_source = text_at(s, "peak_source");
  t.peak_gflops_sgemm = optional_number_at(s, "peak_gflops_sgemm");
  t.sgemm_source = text_at(s, "sgemm_source");
  t.mfu_sgemm = optional_number_at(s, "mfu_sgemm");
  if (const Field st = s.at("straggler"); !st.is_null()) {
    StragglerReport r;
    const Field stage = st.at("stage");
    r.stage = stage.is_null() ? -1 : stage.integer();
    r.busy_s = number_at(st, "busy_s");
    r.others_mean_s = number_at(st, "others_mean_busy_s");
    r.excess = number_at(st, "excess_fraction");
    r.layers = integers(st.at("layers_per_stage"));
    r.suggested = integers(st.at("suggested_layers_per_stage"));
    r.message = text_at(st, "message");
    t.straggler = r;
  }
  if (const Field traced = s.at("traced_steps"); !traced.is_null()) {
    const std::vector<int> range = integers(traced);
    if (range.size() != 2) traced.fail("not [first, last]");
    t.traced_steps = std::pair<int, int>{range[0], range[1]};
  }
  const Field skipped = s.at("skipped_steps");
  t.skipped_nonfinite = skipped.at("nonfinite").int64();
  t.skipped_spike = skipped.at("spike").int64();
  // Absent when ParallelTrainer::run's summary was written without `pipelane train` around it.
  if (s.has("unigram_val_loss")) t.unigram_val_loss = number_at(s, "unigram_val_loss");  // null: NaN
  if (s.has("config")) t.config = text_at(s, "config");
  if (s.has("memory"))  // absent in summaries written before the memory model
    for (const Field& a : s.at("memory").elements())
      t.memory.push_back({integer_at(a, "rank"), integer_at(a, "stage"), integer_at(a, "tp"), integer_at(a, "dp"),
                          number_at(a, "predicted_bytes"), number_at(a, "high_water_bytes")});
  return t;
}

SimulationPart simulation_part(const Field& s) {
  const Field m = s.at("simulation");
  SimulationPart p;
  p.cluster = text_at(m, "cluster");
  p.cluster_source = text_at(m, "cluster_source");
  p.device = text_at(m, "device");
  p.device_description = text_at(m, "device_description");
  p.device_memory_bytes = number_at(m, "device_memory_bytes");
  p.price_per_device_hour = number_at(m, "price_per_device_hour");
  p.price_source = text_at(m, "price_source");
  p.compute_from = text_at(m, "compute_from");
  p.lanes_from = text_at(m, "lanes_from");
  p.profile_as_measured = m.at("profile_as_measured").boolean();
  p.replicas_identical = m.at("replicas_identical").boolean();
  p.replicas_simulated = integer_at(m, "replicas_simulated");
  p.world = integer_at(m, "world");
  p.all_reduce = text_at(m, "all_reduce");
  for (const Field& ms : m.at("iteration_ms").elements()) p.iteration_ms.push_back(ms.number());
  p.utilisation_training_only = number_at(m, "utilisation_training_only");
  p.utilisation_with_lanes = optional_number_at(m, "utilisation_with_lanes");
  p.tokens_per_s_lanes_off = number_at(m, "tokens_per_s_lanes_off");
  p.wall_s = number_at(m, "wall_s");
  return p;
}

StageTime stage_time(const Field& f, bool simulated) {
  StageTime st;
  st.stage = integer_at(f, "stage");
  st.busy_s = number_at(f, "busy_s");
  st.idle_s = number_at(f, "idle_s");
  st.bubble_fraction = number_at(f, "bubble_fraction");
  if (simulated) {
    SimulatedStage sim;
    for (const auto& [kind, seconds] : f.at("idle_by_kind_s").members()) sim.idle_by_kind_s[kind] = seconds.number();
    sim.memory_bytes = number_at(f, "memory_bytes");
    st.simulated = sim;
  }
  return st;
}

void read_common_part(const Field& f, bool simulated, RunSummary& s) {
  s.steps = integer_at(f, "steps");
  s.tokens = number_at(f, "tokens");
  s.train_seconds = number_at(f, "train_seconds");
  s.final_loss = optional_number_at(f, "final_loss");
  s.final_val_loss = optional_number_at(f, "final_val_loss");
  for (const Field& e : f.at("evals").elements()) s.evals.push_back({integer_at(e, "step"), number_at(e, "val_loss")});
  s.step_ms_median = number_at(f, "step_ms_median");
  s.tokens_per_s = number_at(f, "tokens_per_s");
  s.flops_per_token = number_at(f, "flops_per_token");
  s.peak_gflops = number_at(f, "peak_gflops");
  s.mfu = number_at(f, "mfu");
  const Field p = f.at("parallel");
  s.parallel = {integer_at(p, "tp"), integer_at(p, "dp"), integer_at(p, "pp"), text_at(p, "schedule"),
                integer_at(p, "virtual_stages"), integer_at(p, "microbatches")};
  for (const Field& st : f.at("stages").elements()) s.stages.push_back(stage_time(st, simulated));
  s.bubble_fraction_measured = number_at(f, "bubble_fraction_measured");
  s.bubble_fraction_theoretical = number_at(f, "bubble_fraction_theoretical");
  const Field ms = f.at("measured_op_ms");
  s.measured_op_ms = {number_at(ms, "forward"), number_at(ms, "backward"), number_at(ms, "backward_weight")};
  s.training_arena_bytes_rank0 = number_at(f, "training_arena_bytes_rank0");
  s.resumed_from_step = integer_at(f, "resumed_from_step");
}

}  // namespace

RunSummary run_summary_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw SummaryError(where + ": not a run's summary.json (" + type_name(j) + ", not an object)");
  const Field f(j, "", where);
  RunSummary s;
  s.schema_version = 1;  // every summary.json written before the key existed
  if (const auto version = f.find("schema_version")) {
    s.schema_version = version->integer();
    if (s.schema_version < 1 || s.schema_version > kRunSummarySchemaVersion)
      version->fail("version " + std::to_string(s.schema_version) + "; this pipelane reads versions 1 to " +
                    std::to_string(kRunSummarySchemaVersion));
  }
  const auto simulated = f.find("simulated");
  const bool simulation = simulated && simulated->boolean();
  read_common_part(f, simulation, s);
  if (simulation) s.simulation = simulation_part(f);
  else s.training = training_part(f);
  if (const auto lanes = f.find("lanes")) {
    if (s.simulation) s.simulated_lanes = simulated_lanes(*lanes);
    else s.lanes = training_lanes(*lanes, s.train_seconds, s.parallel.tp * s.parallel.dp);
  } else {
    (void)f.at("lanes");  // null when lanes were off, but there
  }
  return s;
}

RunSummary read_run_summary(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SummaryError(path + ": cannot open it");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw SummaryError(path + ": not JSON (" + e.what() + ")");
  }
  return run_summary_from_json(j, path);
}

}  // namespace pipelane
