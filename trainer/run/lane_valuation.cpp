#include "trainer/run/lane_valuation.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "trainer/run/run_summary.h"

namespace pipelane {

namespace {

// The step times of the metrics.jsonl beside a summary.json (rows with "step_ms"); none without one.
std::optional<StepQuartiles> quartiles_beside(const std::string& summary_path) {
  std::ifstream in(std::filesystem::path(summary_path).parent_path() / "metrics.jsonl");
  if (!in) return std::nullopt;
  std::vector<double> step_ms;
  for (std::string line; std::getline(in, line);) {
    try {
      const nlohmann::json row = nlohmann::json::parse(line);
      if (row.is_object() && row.contains("step_ms") && row["step_ms"].is_number()) step_ms.push_back(row["step_ms"].get<double>());
    } catch (const nlohmann::json::exception&) {  // a line cut short: the others still tell
    }
  }
  return steady_step_quartiles(step_ms);
}

BaselineRun load_baseline(const TrainOptions& o, int world_expected) {
  const std::string& path = o.lanes.baseline;
  if (!std::ifstream(path)) throw ConfigError(path + ": cannot open the file named by [lanes] baseline");
  RunSummary s;
  try {
    s = read_run_summary(path);
  } catch (const SummaryError& e) {
    throw ConfigError(e.what());
  }
  BaselineRun b{path, s.train_seconds, s.step_ms_median, quartiles_beside(path)};
  if (s.steps != o.train.steps)
    throw ConfigError(path + ": the baseline ran " + std::to_string(s.steps) + " steps, this run [train] steps = " +
                      std::to_string(o.train.steps) + " (the overhead compares equal runs)");
  if (s.lanes || s.simulated_lanes)
    throw ConfigError(path + ": the baseline ran with lanes on; give the summary.json of a lanes-off run");
  if (s.parallel.world() != world_expected)
    throw ConfigError(path + ": the baseline ran on " + std::to_string(s.parallel.world()) + " ranks, this run on " +
                      std::to_string(world_expected));
  if (s.parallel.pp != o.parallel.pp || s.parallel.tp != o.parallel.tp || s.parallel.schedule != o.parallel.schedule)
    throw ConfigError(path + ": the baseline's grid or schedule differs from this run's [parallel]");
  if (!(b.train_seconds > 0)) throw ConfigError(path + ": the baseline's train_seconds is not positive");
  return b;
}

}  // namespace

std::optional<StepQuartiles> steady_step_quartiles(const std::vector<double>& step_ms) {
  std::vector<double> v(step_ms.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(2, step_ms.size() / 2)),
                        step_ms.end());
  if (v.size() < 4) return std::nullopt;
  std::sort(v.begin(), v.end());
  // Linear interpolation between order statistics (numpy's default).
  const auto quantile = [&v](double q) {
    const double at = q * static_cast<double>(v.size() - 1);
    const std::size_t below = static_cast<std::size_t>(std::floor(at));
    const std::size_t above = std::min(below + 1, v.size() - 1);
    return v[below] + (at - static_cast<double>(below)) * (v[above] - v[below]);
  };
  return StepQuartiles{quantile(0.25), quantile(0.75)};
}

std::optional<double> TrainingOverhead::noise_fraction() const {
  if (!baseline_step_quartiles || !step_quartiles || !(baseline_step_ms_median > 0)) return std::nullopt;
  return std::max(baseline_step_quartiles->iqr_ms(), step_quartiles->iqr_ms()) / baseline_step_ms_median;
}

std::optional<bool> TrainingOverhead::inside_noise() const {
  const std::optional<double> noise = noise_fraction();
  if (!noise) return std::nullopt;
  return std::max(std::abs(fraction()), std::abs(step_median_fraction())) <= *noise;
}

LaneValuation LaneValuation::load(const TrainOptions& o, int world) {
  LaneValuation v;
  if (o.lanes.enabled_lanes().empty()) return v;
  v.train_price_per_hour_ = o.lanes.train_price_per_hour;
  v.dedicated_price_per_hour_ = o.lanes.dedicated_price_per_hour;
  if (!o.lanes.baseline.empty()) {
    v.baseline_ = load_baseline(o, world);
  }
  if (!o.lanes.dedicated.empty()) {
    v.dedicated_path_ = o.lanes.dedicated;
    std::ifstream in(o.lanes.dedicated);
    if (!in) throw ConfigError(o.lanes.dedicated + ": cannot open the file named by [lanes] dedicated");
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = o.lanes.dedicated + ":" + std::to_string(line_no);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        throw ConfigError(where + ": expected one JSON object per line, as `pipelane lane-bench NAME --json` prints");
      }
      if (!j.is_object() || !j.contains("lane") || !j["lane"].is_string() || !j.contains("units_per_s") ||
          !j["units_per_s"].is_number())
        throw ConfigError(where + ": expected \"lane\" and \"units_per_s\" (`pipelane lane-bench NAME --json`)");
      const double ups = j["units_per_s"].get<double>();
      if (!(ups > 0))
        throw ConfigError(where + ": lane " + j["lane"].get<std::string>() + " has units_per_s = " +
                          std::to_string(ups) + "; a lane's dedicated throughput must be positive");
      v.dedicated_[j["lane"].get<std::string>()] = ups;  // a later line replaces an earlier one
    }
    for (const std::string& name : o.lanes.enabled_lanes())
      if (!v.dedicated_.count(name))
        throw ConfigError(o.lanes.dedicated + ": no dedicated throughput for lane " + name +
                          " (append `pipelane lane-bench " + name + " --json` to it)");
  }
  return v;
}

namespace {

std::optional<double> given(double price) { return price > 0 ? std::optional<double>(price) : std::nullopt; }

nlohmann::json number_or_null(const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); }

// Work a lane did while training ran (its calibration ran before).
double training_units(const LaneTotal& lane) { return lane.units - lane.calibration_units; }

}  // namespace

std::optional<EstimatedOverhead> estimate_overhead(const CombinedLaneSummary& total, double train_seconds,
                                                   int replicas_per_stage) {
  if (!total.interference || !total.interference->estimated) return std::nullopt;
  const double replicas = std::max(replicas_per_stage, 1);
  return EstimatedOverhead{total.overrun_s / replicas, total.interference->extra_s / replicas,
                           total.interference->stderr_s / replicas, train_seconds};
}

double CostSaving::gross_fraction() const {
  return training_device_s > 0 ? value_device_s * price_ratio / training_device_s : 0.0;
}

std::optional<double> CostSaving::net_fraction() const {
  if (!extra_device_s) return std::nullopt;
  return training_device_s > 0 ? (value_device_s * price_ratio - *extra_device_s) / training_device_s : 0.0;
}

std::map<std::string, LaneValue> LaneValuation::value_lanes(const CombinedLaneSummary& lanes,
                                                            double train_seconds) const {
  std::map<std::string, LaneValue> values;
  for (const auto& [name, lane] : lanes.lanes) {
    LaneValue& v = values[name];
    const double units = training_units(lane);
    v.units_per_train_s = train_seconds > 0 ? units / train_seconds : 0.0;
    const auto it = dedicated_.find(name);
    if (it != dedicated_.end()) {
      v.dedicated_units_per_s = it->second;
      v.value_device_s = units / it->second;
    }
  }
  return values;
}

LanesValuation LaneValuation::value(const CombinedLaneSummary& total, double train_seconds, double step_ms_median,
                                    int world, std::optional<StepQuartiles> step_quartiles,
                                    int replicas_per_stage) const {
  LanesValuation out;
  out.lanes = value_lanes(total, train_seconds);
  if (baseline_)
    out.overhead = TrainingOverhead{baseline_->path,           baseline_->train_seconds, train_seconds,
                                    baseline_->step_ms_median, step_ms_median,           baseline_->step_quartiles,
                                    step_quartiles};
  out.estimated_overhead = estimate_overhead(total, train_seconds, replicas_per_stage);
  if (dedicated_.empty()) return out;
  CostSaving c;
  c.dedicated = dedicated_path_;
  for (const auto& [name, lane] : out.lanes) c.value_device_s += lane.value_device_s.value_or(0.0);
  // Without a baseline the lanes-off device-time is this run's less the estimated extra time
  // (then the net saving is estimated), or, without an estimate either, this run's own, and only
  // the gross saving is known.
  c.training_device_s = world * (baseline_ ? baseline_->train_seconds : train_seconds);
  if (baseline_) {
    c.extra_device_s = world * (train_seconds - baseline_->train_seconds);
  } else if (const auto& e = out.estimated_overhead) {
    c.extra_device_s = world * e->extra_train_s();
    c.training_device_s = world * (train_seconds - e->extra_train_s());
    c.estimated = true;
  }
  c.train_price_per_hour = given(train_price_per_hour_);
  c.dedicated_price_per_hour = given(dedicated_price_per_hour_);
  if (c.train_price_per_hour && c.dedicated_price_per_hour)
    c.price_ratio = *c.dedicated_price_per_hour / *c.train_price_per_hour;
  out.cost_saving = c;
  return out;
}

nlohmann::json valued_lanes_json(const CombinedLaneSummary& combined, const std::map<std::string, LaneValue>& values) {
  nlohmann::json out = to_json(combined);
  for (const auto& [name, v] : values) {
    nlohmann::json& lane = out["lanes"][name];
    lane["units_per_train_s"] = v.units_per_train_s;
    lane["dedicated_units_per_s"] = number_or_null(v.dedicated_units_per_s);
    lane["value_device_s"] = number_or_null(v.value_device_s);
  }
  return out;
}

nlohmann::json valued_total_json(const CombinedLaneSummary& total, const LanesValuation& valuation) {
  nlohmann::json out = valued_lanes_json(total, valuation.lanes);
  if (const auto& o = valuation.overhead) {
    out["overhead"] = {
        {"baseline", o->baseline},
        {"baseline_train_s", o->baseline_train_s},
        {"train_s", o->train_s},
        {"fraction", o->fraction()},
        {"baseline_step_ms_median", o->baseline_step_ms_median},
        {"step_ms_median", o->step_ms_median},
        {"step_median_fraction", o->step_median_fraction()},
    };
    // Written only when known, so a summary.json from before them reads and writes back the same.
    const auto quartiles = [&](const char* prefix, const std::optional<StepQuartiles>& q) {
      if (!q) return;
      out["overhead"][std::string(prefix) + "step_ms_p25"] = q->p25_ms;
      out["overhead"][std::string(prefix) + "step_ms_p75"] = q->p75_ms;
    };
    quartiles("baseline_", o->baseline_step_quartiles);
    quartiles("", o->step_quartiles);
    if (const auto noise = o->noise_fraction()) {
      out["overhead"]["noise_fraction"] = *noise;
      out["overhead"]["inside_noise"] = *o->inside_noise();
    }
  } else {
    out["overhead"] = nullptr;
    out["overhead_needs"] = "[lanes] baseline = the summary.json of a lanes-off run";
  }
  // Written only where the total has an interference estimate (summaries from before it lack both).
  if (total.interference) {
    const auto& e = valuation.estimated_overhead;
    out["estimated_overhead_fraction"] = e ? nlohmann::json(e->fraction()) : nlohmann::json(nullptr);
    out["estimated_overhead_fraction_stderr"] = e ? nlohmann::json(e->fraction_stderr()) : nlohmann::json(nullptr);
  }
  const auto& c = valuation.cost_saving;
  if (!c) {
    out["cost_saving"] = nullptr;
    out["cost_saving_needs"] = "[lanes] dedicated = JSON lines of `pipelane lane-bench NAME --json`";
    return out;
  }
  const std::optional<double> net = c->net_fraction();
  // In the prices' currency when they were given (device-seconds x price per hour / 3600).
  const auto cost = [&](const std::optional<double>& device_s, const std::optional<double>& price) {
    return device_s && c->train_price_per_hour ? nlohmann::json(*device_s * price.value_or(*c->train_price_per_hour) / 3600)
                                               : nlohmann::json(nullptr);
  };
  out["cost_saving"] = {
      {"dedicated", c->dedicated},
      {"value_device_s", c->value_device_s},
      {"training_device_s", c->training_device_s},
      {"extra_device_s", number_or_null(c->extra_device_s)},
      {"train_price_per_hour", number_or_null(c->train_price_per_hour)},
      {"dedicated_price_per_hour", number_or_null(c->dedicated_price_per_hour)},
      {"price_ratio", c->price_ratio},
      {"value_cost", cost(c->value_device_s, c->dedicated_price_per_hour)},
      {"training_cost", cost(c->training_device_s, c->train_price_per_hour)},
      {"extra_cost", cost(c->extra_device_s, c->train_price_per_hour)},
      {"gross_fraction", c->gross_fraction()},
      {"net_fraction", number_or_null(net)},
      // The net saving where it is known, else the gross one ("gross": true).
      {"fraction", net.value_or(c->gross_fraction())},
      {"gross", !net.has_value()},
  };
  if (c->estimated) out["cost_saving"]["estimated"] = true;  // absent: measured, or gross only
  return out;
}

}  // namespace pipelane
