#include "trainer/lane_valuation.h"

#include <fstream>

namespace pipelane {

namespace {

nlohmann::json read_json_file(const std::string& path, const char* key) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the file named by [lanes] " + key);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": [lanes] " + key + " expects a JSON file: " + e.what());
  }
}

BaselineRun load_baseline(const TrainOptions& o, int world_expected) {
  const std::string& path = o.lanes.baseline;
  const nlohmann::json s = read_json_file(path, "baseline");
  const auto number = [&](const char* key) {
    if (!s.contains(key) || !s[key].is_number())
      throw ConfigError(path + ": [lanes] baseline expects a run's summary.json; it has no number '" + key + "'");
    return s[key].get<double>();
  };
  BaselineRun b{path, number("train_seconds"), number("step_ms_median")};
  if (static_cast<int>(number("steps")) != o.train.steps)
    throw ConfigError(path + ": the baseline ran " + std::to_string(static_cast<int>(number("steps"))) +
                      " steps, this run [train] steps = " + std::to_string(o.train.steps) +
                      " (the overhead compares equal runs)");
  if (s.contains("lanes") && !s["lanes"].is_null())
    throw ConfigError(path + ": the baseline ran with lanes on; give the summary.json of a lanes-off run");
  if (s.contains("parallel") && s["parallel"].is_object()) {
    const auto& p = s["parallel"];
    const int world = p.value("tp", 1) * p.value("dp", 1) * p.value("pp", 1);
    if (world != world_expected)
      throw ConfigError(path + ": the baseline ran on " + std::to_string(world) + " ranks, this run on " +
                        std::to_string(world_expected));
    if (p.value("pp", 1) != o.parallel.pp || p.value("tp", 1) != o.parallel.tp ||
        p.value("schedule", o.parallel.schedule) != o.parallel.schedule)
      throw ConfigError(path + ": the baseline's grid or schedule differs from this run's [parallel]");
  }
  if (!(b.train_seconds > 0)) throw ConfigError(path + ": the baseline's train_seconds is not positive");
  return b;
}

}  // namespace

LaneValuation LaneValuation::load(const TrainOptions& o, int world) {
  LaneValuation v;
  if (o.lanes.enabled_lanes().empty()) return v;
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

double LaneValuation::annotate_lanes(nlohmann::json& summary, double train_seconds) const {
  double value_s = 0;
  if (!summary.contains("lanes")) return 0;
  for (auto& [name, lane] : summary["lanes"].items()) {
    const double units = lane.value("units", 0.0);
    lane["units_per_train_s"] = train_seconds > 0 ? units / train_seconds : 0.0;
    const auto it = dedicated_.find(name);
    if (it == dedicated_.end()) {
      lane["dedicated_units_per_s"] = nullptr;
      lane["value_device_s"] = nullptr;
    } else {
      lane["dedicated_units_per_s"] = it->second;
      lane["value_device_s"] = units / it->second;
      value_s += units / it->second;
    }
  }
  return value_s;
}

void LaneValuation::annotate(nlohmann::json& total, double train_seconds, double step_ms_median, int world) const {
  const double value_s = annotate_lanes(total, train_seconds);
  std::optional<double> extra_s;
  if (baseline_) {
    const BaselineRun& b = *baseline_;
    extra_s = world * (train_seconds - b.train_seconds);
    total["overhead"] = {
        {"baseline", b.path},
        {"baseline_train_s", b.train_seconds},
        {"train_s", train_seconds},
        {"fraction", (train_seconds - b.train_seconds) / b.train_seconds},
        {"baseline_step_ms_median", b.step_ms_median},
        {"step_ms_median", step_ms_median},
        {"step_median_fraction",
         b.step_ms_median > 0 ? (step_ms_median - b.step_ms_median) / b.step_ms_median : 0.0},
    };
  } else {
    total["overhead"] = nullptr;
    total["overhead_needs"] = "[lanes] baseline = the summary.json of a lanes-off run";
  }
  if (dedicated_.empty()) {
    total["cost_saving"] = nullptr;
    total["cost_saving_needs"] = "[lanes] dedicated = JSON lines of `pipelane lane-bench NAME --json`";
    return;
  }
  // Without a baseline the training device-time alone is not known: the saving is then the gross
  // value over this run's own device-time, with the extra training time not subtracted.
  const double training_s = world * (baseline_ ? baseline_->train_seconds : train_seconds);
  total["cost_saving"] = {
      {"dedicated", dedicated_path_},
      {"value_device_s", value_s},
      {"training_device_s", training_s},
      {"extra_device_s", extra_s ? nlohmann::json(*extra_s) : nlohmann::json(nullptr)},
      {"fraction", training_s > 0 ? (value_s - extra_s.value_or(0.0)) / training_s : 0.0},
      {"gross", !extra_s.has_value()},
  };
}

}  // namespace pipelane
