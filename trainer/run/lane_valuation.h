// What the lanes' work was worth and what it cost training, as FreeRide reports it (its pricing,
// the formulas and its published figures are summarised in the README's lanes section):
//   overhead     = (T_with_lanes - T_lanes_off) / T_lanes_off
//   gross saving = value of the lane work / cost of training with lanes off
//   net saving   = (value of the lane work - cost of the extra training time) / the same
// where the value is the lane work in dedicated device-seconds (how long the lane alone would
// need) at the dedicated device's price, and costs are training device-seconds at the training
// device's price. FreeRide's per-task figures are gross; both are reported side by side.
// The inputs come from [lanes], read and checked before training starts:
//   baseline  = summary.json of a lanes-off run of the same config (T_lanes_off; without it only
//               the gross saving exists, over this run's own device-time)
//   dedicated = JSON lines of `pipelane lane-bench NAME --json`: each lane alone on one core
//   train_price_per_hour, dedicated_price_per_hour = the two prices (default: equal)
// A device-second is one rank's share of the machine for a second (a rank runs on cores / ranks
// cores; lane-bench on one core, which is that share when there is one core per rank). Only work
// done during training is valued: a lane's calibration steps ran before it, outside its time.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lanes/lane_summary.h"
#include "trainer/config/train_options.h"

namespace pipelane {

// The middle half of a run's steady step times (ms): its spread, what a difference between two
// runs is judged against (issue #25: repeated 50-step runs on a busy 2-core machine vary ~2x).
struct StepQuartiles {
  double p25_ms = 0, p75_ms = 0;
  double iqr_ms() const { return p75_ms - p25_ms; }
};
// Of the steps after the warm-up steady_step_seconds skips (the first two, or the first half of a
// short run); none for fewer than 4 such steps.
std::optional<StepQuartiles> steady_step_quartiles(const std::vector<double>& step_ms);

struct BaselineRun {
  std::string path;
  double train_seconds = 0;
  double step_ms_median = 0;
  std::optional<StepQuartiles> step_quartiles;  // from the metrics.jsonl beside its summary.json
};

// One lane's work during training, valued.
struct LaneValue {
  double units_per_train_s = 0;
  std::optional<double> dedicated_units_per_s;  // without [lanes] dedicated: unknown
  std::optional<double> value_device_s;
};

struct TrainingOverhead {
  std::string baseline;
  double baseline_train_s = 0;
  double train_s = 0;
  double baseline_step_ms_median = 0;
  double step_ms_median = 0;
  std::optional<StepQuartiles> baseline_step_quartiles, step_quartiles;  // none: not known
  double fraction() const { return (train_s - baseline_train_s) / baseline_train_s; }
  double step_median_fraction() const {
    return baseline_step_ms_median > 0 ? (step_ms_median - baseline_step_ms_median) / baseline_step_ms_median : 0.0;
  }
  // The noise, as a share of the baseline's median step: the wider of the two runs' interquartile
  // ranges. Within-run spread understates run-to-run drift, so this errs toward "inside the noise".
  std::optional<double> noise_fraction() const;
  // Both the training-time and the median-step difference within the noise: the runs do not tell
  // lanes on from lanes off.
  std::optional<bool> inside_noise() const;
};

// What the lanes cost training as the run itself can tell, without a lanes-off run: the overrun
// and the interference the control gaps estimate (lanes/interference_estimate.h), both per
// pipeline replica (summed over the stages: a stage's delay holds up the stages that wait for it,
// and its ranks of one stage are delayed side by side, so they count once).
struct EstimatedOverhead {
  double overrun_s = 0;
  double interference_s = 0, interference_stderr_s = 0;
  double train_s = 0;  // this run's
  double extra_train_s() const { return overrun_s + interference_s; }
  // Against the training time without lanes this implies, as TrainingOverhead::fraction is.
  double fraction() const { return train_s > extra_train_s() ? extra_train_s() / (train_s - extra_train_s()) : 0.0; }
  double fraction_stderr() const { return train_s > extra_train_s() ? interference_stderr_s / (train_s - extra_train_s()) : 0.0; }
};

// None unless `total` has an interference estimate with a number.
std::optional<EstimatedOverhead> estimate_overhead(const CombinedLaneSummary& total, double train_seconds,
                                                   int replicas_per_stage);

struct CostSaving {
  std::string dedicated;                  // the lane-bench file
  double value_device_s = 0;              // lane work in dedicated device-seconds
  double training_device_s = 0;           // of the lanes-off run (this run's without a baseline)
  // This run's minus the lanes-off run's: measured with a baseline, else estimated from the
  // overrun and the control gaps (`estimated`); none when neither is known.
  std::optional<double> extra_device_s;
  bool estimated = false;
  std::optional<double> train_price_per_hour;      // as given; none: prices not given
  std::optional<double> dedicated_price_per_hour;  // as given; none: the training device's
  double price_ratio = 1;                 // dedicated / training device price
  double gross_fraction() const;
  std::optional<double> net_fraction() const;  // needs extra_device_s
  // Net above gross: the lanes run took less training time than the lanes-off run.
  bool net_above_gross() const { return extra_device_s && *extra_device_s < 0; }
};

struct LanesValuation {
  std::map<std::string, LaneValue> lanes;
  std::optional<TrainingOverhead> overhead;  // needs [lanes] baseline
  std::optional<EstimatedOverhead> estimated_overhead;  // needs an interference estimate (enough control gaps)
  std::optional<CostSaving> cost_saving;     // needs [lanes] dedicated
};

class LaneValuation {
 public:
  // ConfigError naming the file (and line) when a file is missing, not what it should be, from a
  // different run shape (steps, grid) or without an enabled lane.
  static LaneValuation load(const TrainOptions& options, int world);

  // The job's lanes (combined over ranks), valued. `train_seconds`: this run's training time;
  // `world`: ranks, each one training device; `replicas_per_stage`: tp x dp, the ranks of one
  // pipeline stage (the estimated overhead counts a stage's delay once).
  LanesValuation value(const CombinedLaneSummary& total, double train_seconds, double step_ms_median,
                       int world, std::optional<StepQuartiles> step_quartiles = std::nullopt,
                       int replicas_per_stage = 1) const;
  // value()'s per-lane part alone (for one stage's lanes).
  std::map<std::string, LaneValue> value_lanes(const CombinedLaneSummary& lanes, double train_seconds) const;

  const std::optional<BaselineRun>& baseline() const { return baseline_; }

 private:
  std::optional<BaselineRun> baseline_;
  std::map<std::string, double> dedicated_;  // lane -> units per second alone on one core
  std::string dedicated_path_;
  double train_price_per_hour_ = 0;      // 0: not given
  double dedicated_price_per_hour_ = 0;  // 0: the training device's
};

// summary.json's lanes entries: to_json(combined) with each lane's value, and for the job's total
// also "overhead" and "cost_saving" (null, with "overhead_needs" / "cost_saving_needs" naming the
// [lanes] key that would fill them, when their input was not given), and where the total has an
// interference estimate, "estimated_overhead_fraction" and its "_stderr" (null when there is no
// number); a cost saving whose net figure comes from that estimate says "estimated": true.
nlohmann::json valued_lanes_json(const CombinedLaneSummary& combined, const std::map<std::string, LaneValue>& values);
nlohmann::json valued_total_json(const CombinedLaneSummary& total, const LanesValuation& valuation);

}  // namespace pipelane
