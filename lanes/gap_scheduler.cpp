#include "lanes/gap_scheduler.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "lanes/control_gaps.h"
#include "lanes/lane_progress.h"
#include "lanes/lane_step_costs.h"
#include "parallel/gap_fit.h"

namespace pipelane {
namespace {

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

// When the transfer a gap waits for arrived, from the polls between lane steps (see GapRecord).
class GapScheduler::ArrivalWatch {
 public:
  ArrivalWatch(GapRecord& record, const std::function<bool()>& arrived, const Clock& clock)
      : record_(record), arrived_(arrived), clock_(clock) {}
  // A poll with nothing run since the previous one: the arrival time is that poll's.
  bool poll_idle() {
    if (!seen_ && arrived_()) {
      seen_ = true;
      record_.arrived_s = clock_();
      record_.arrived_exact = true;
    }
    return seen_;
  }
  // A poll right after a lane step [s, e]: the arrival happened during the step.
  bool poll_after_step(const LaneStepRecord& step) {
    if (!seen_ && arrived_()) {
      seen_ = true;
      record_.arrived_exact = false;
      record_.arrived_s = 0.5 * (step.start_s + step.end_s);
    }
    return seen_;
  }

 private:
  GapRecord& record_;
  const std::function<bool()>& arrived_;
  const Clock& clock_;
  bool seen_ = false;
};

GapScheduler::GapScheduler(Backend& backend, std::vector<LaneSpec> lanes, GapSchedulerOptions options,
                           std::chrono::steady_clock::time_point origin, Logger logger, Clock clock)
    : backend_(backend), device_backend_(backend.kind() != DeviceKind::Cpu), options_(std::move(options)),
      clock_(std::move(clock)), accounting_(options_), device_steps_(backend_, options_, logger_) {
  if (!logger) logger = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  // Every line says once where it comes from; the messages themselves do not repeat it.
  logger_ = [logger, prefix = "lanes: stage " + std::to_string(options_.stage) + " rank " +
                             std::to_string(options_.rank) + ": "](const std::string& line) { logger(prefix + line); };
  if (!clock_) clock_ = [origin] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count(); };
  if (!(options_.margin > 0)) throw LaneError("gap scheduler: margin must be > 0");
  const std::size_t total = lanes.size() * options_.lane_memory_bytes;
  if (!lanes.empty() && total > options_.stage_memory_bytes)
    throw LaneError("stage " + std::to_string(options_.stage) + ": " + std::to_string(lanes.size()) + " lanes x " +
                    mib(options_.lane_memory_bytes) + " = " + mib(total) + " exceed the stage's lane memory cap of " +
                    mib(options_.stage_memory_bytes) + " ([lanes] memory_mb, stage_memory_mb)");
  for (LaneSpec& spec : lanes) {
    if (!spec.lane) throw LaneError("gap scheduler: a lane spec without a lane");
    std::string name = spec.lane->name();
    if (find(name)) throw LaneError("lane '" + name + "' given twice");
    lanes_.push_back(make_lane_slot(std::move(name), std::move(spec), backend_, device_backend_, options_, clock_));
  }
}

GapScheduler::~GapScheduler() {
  teardown();
  // A lane abandoned past its deadline still runs on its thread, with references into its slot
  // (context, arena, options): those must never be freed.
  for (auto& slot : lanes_)
    if (slot->lane->abandoned()) (void)slot.release();
}

LaneSlot* GapScheduler::find(const std::string& name) {
  for (auto& slot : lanes_)
    if (slot->name == name) return slot.get();
  return nullptr;
}
const LaneSlot* GapScheduler::find(const std::string& name) const {
  for (const auto& slot : lanes_)
    if (slot->name == name) return slot.get();
  return nullptr;
}

std::vector<std::string> GapScheduler::lane_names() const {
  std::vector<std::string> names;
  for (const auto& slot : lanes_) names.push_back(slot->name);
  return names;
}

bool GapScheduler::on_device(const std::string& lane) const {
  const LaneSlot* slot = find(lane);
  return slot && slot->on_device;
}

bool GapScheduler::quarantined(const std::string& lane) const {
  const LaneSlot* slot = find(lane);
  return slot && slot->stats.quarantined;
}

double GapScheduler::predicted_step_s(const std::string& lane) const {
  const LaneSlot* slot = find(lane);
  return slot && slot->has_cost ? slot->stats.predicted_step_s : 0;
}

bool GapScheduler::run_step(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted) {
  slot.limits.step_deadline_s =
      gap_id < 0 ? options_.call_deadline_s
                 : std::max(options_.step_deadline_factor * predicted, options_.step_deadline_min_s);
  slot.lane->set_limits(slot.limits);
  const double start = clock_();
  double units = 0;
  std::string failure = call_step(*slot.lane, *slot.ctx, &units);
  const double end = clock_();
  const double duration = end - start;
  // Recorded even when it failed: the time was spent either way (units count only on success).
  recent_.push_back({iteration, gap_id, kind, slot.name, start, end, failure.empty() ? units : 0.0});
  if (failure.empty()) slot.count_step(gap_id < 0, units);
  const bool outlier =
      failure.empty() && judge_runaway(slot, options_, gap_id, duration, predicted, units > 0, &failure);
  if (!failure.empty()) {
    slot.quarantine(failure, logger_);
    return false;
  }
  learn_host_step_cost(slot, options_, duration, units, outlier);
  slot.stats.finished = slot.lane->finished();  // the host's answer from the step: no lane code runs here
  return true;
}

void GapScheduler::calibrate_on_device(LaneSlot& slot, std::vector<double>& durations,
                                       std::vector<double>& productive) {
  // The steps' event times, waited for (before training starts).
  for (int k = 0; k < options_.calibration_steps && !slot.stats.finished; ++k)
    device_steps_.post(slot, -1, -1, WaitKind::None, 0);
  device_steps_.settle(true, accounting_);
  for (const auto& [seconds, did_work] : slot.calibration_device) {
    durations.push_back(seconds);
    if (did_work) productive.push_back(seconds);
  }
}

void GapScheduler::calibrate_on_host(LaneSlot& slot, std::vector<double>& durations,
                                     std::vector<double>& productive) {
  for (int k = 0; k < options_.calibration_steps && !slot.stats.finished; ++k) {
    recent_.clear();
    const bool ok = run_step(slot, -1, -1, WaitKind::None, 0);
    accounting_.keep_steps(recent_);
    if (!ok) break;
    durations.push_back(recent_.back().end_s - recent_.back().start_s);
    slot.calibration_s += durations.back();
    if (recent_.back().units > 0) productive.push_back(durations.back());
  }
}

std::map<std::string, double> GapScheduler::calibrate() {
  std::map<std::string, double> costs;
  for (auto& owned : lanes_) {
    LaneSlot& slot = *owned;
    if (!slot.ensure_setup(torn_down_, logger_)) continue;
    slot.stats.finished = slot.lane->finished();
    std::vector<double> durations, productive;
    if (slot.on_device)
      calibrate_on_device(slot, durations, productive);
    else
      calibrate_on_host(slot, durations, productive);
    if (slot.stats.quarantined) continue;
    set_calibrated_cost(slot, durations, productive);
    costs[slot.name] = slot.stats.calibrated_step_s;
  }
  calibrated_ = true;
  return costs;
}

void GapScheduler::fill(int iteration, int gap_id, WaitKind kind, const std::function<bool()>& arrived) {
  GapRecord record;
  record.iteration = iteration;
  record.gap_id = gap_id;
  record.kind = kind;
  record.start_s = clock_();
  recent_.clear();
  const double predicted_gap = predicted_gap_s(gap_id);  // before this gap's measurement
  ArrivalWatch watch(record, arrived, clock_);
  const bool profiling = completed_iterations_ < options_.profile_iterations;
  record.profiling = profiling;
  if (!calibrated_ && !warned_uncalibrated_ && !lanes_.empty()) {
    warned_uncalibrated_ = true;
    logger_("GapScheduler::calibrate() was not called before training; lanes stay idle until it is");
  }
  if (device_backend_) device_steps_.settle(false, accounting_);
  const std::size_t first_device_step = device_steps_.size();
  const bool fillable = !profiling && calibrated_ && !torn_down_ && !lanes_.empty();
  const bool control = fillable && is_control_gap(iteration, gap_id, options_.stage, options_.control_every);
  if (fillable && !control) {
    if (options_.deterministic || device_backend_) run_planned(iteration, gap_id, kind, watch);
    if (!options_.deterministic) run_fitted(iteration, gap_id, kind, predicted_gap, record.start_s, watch);
  }
  while (!watch.poll_idle()) std::this_thread::yield();
  record.end_s = clock_();
  record.lane_steps = static_cast<int>(recent_.size() + (device_steps_.size() - first_device_step));
  device_steps_.stamp_gap(first_device_step, record, accounting_.next_gap_index());
  accounting_.account_gap(record, recent_, lanes_);
  if (fillable) {  // a sample whether a lane step ran or not (interference_estimate.h says why)
    // The scheduler's time after the arrival that overrun does not count: from the later of the
    // arrival and the last host step's end (overrun ends there) to now, the accounting included.
    const double from = std::max(record.arrived_s, recent_.empty() ? record.arrived_s : recent_.back().end_s);
    interference_.gap_ended(iteration, gap_id,
                            control ? InterferenceSampler::GapUse::Control : InterferenceSampler::GapUse::Lanes,
                            clock_() - from);
  }
}

void GapScheduler::training_after_gaps(int iteration, const std::vector<TrainingAfterGap>& after) {
  interference_.training_after_gaps(iteration, after);
}

void GapScheduler::run_planned(int iteration, int gap_id, WaitKind kind, ArrivalWatch& watch) {
  // Deterministic mode, and device lanes always: the frozen sequence, whatever arrived() says;
  // polls only time the arrival. Device steps are only enqueued (the plan puts them first).
  const auto planned = plan_.find(gap_id);
  if (!plan_frozen_ || planned == plan_.end()) return;
  for (const std::size_t index : planned->second) {
    LaneSlot& slot = *lanes_[index];
    if (!slot.schedulable()) continue;
    if (slot.on_device) {
      if (device_steps_.backlog_full(slot))
        ++slot.stats.backlog_skipped_steps;
      else
        device_steps_.post(slot, iteration, gap_id, kind, slot.stats.predicted_step_s);
      continue;
    }
    watch.poll_idle();
    run_step(slot, iteration, gap_id, kind, slot.stats.predicted_step_s);
    watch.poll_after_step(recent_.back());
  }
}

void GapScheduler::run_fitted(int iteration, int gap_id, WaitKind kind, double predicted_gap, double start_s,
                              ArrivalWatch& watch) {
  // Host lanes fitted to the measured time.
  const double budget = gap_budget(predicted_gap, options_.margin);
  const auto host_cost = [&](std::size_t i) { return live_host_step_cost(*lanes_[i]); };
  while (!watch.poll_idle()) {
    const GapFitChoice choice = next_fitting_step(lanes_.size(), next_lane_, clock_() - start_s, budget, host_cost);
    if (!choice.found) break;
    next_lane_ = choice.cursor;
    LaneSlot& chosen = *lanes_[choice.lane];
    run_step(chosen, iteration, gap_id, kind, chosen.stats.predicted_step_s);
    if (watch.poll_after_step(recent_.back())) break;
  }
}

void GapScheduler::end_iteration(int) {
  if (device_backend_) device_steps_.settle(false, accounting_);
  ++completed_iterations_;
  // Once the gaps are known: a lane whose step is longer than every gap's budget will never run
  // (its cost is only re-measured when it runs), which the user should hear about.
  if (completed_iterations_ == options_.profile_iterations && calibrated_ && !accounting_.predicted_gaps().empty())
    warn_lanes_longer_than_every_gap(lanes_, accounting_.predicted_gaps(), options_.margin, logger_);
  const bool device_lanes =
      std::any_of(lanes_.begin(), lanes_.end(), [](const auto& slot) { return slot->on_device; });
  if ((options_.deterministic || device_lanes) && !plan_frozen_ && calibrated_ &&
      completed_iterations_ >= options_.profile_iterations) {
    plan_ = fit_lane_plan(lanes_, accounting_.predicted_gaps(), options_);
    plan_frozen_ = true;
  }
}

LanePlan GapScheduler::plan() const { return named_lane_plan(plan_, lanes_); }

void GapScheduler::set_plan(const LanePlan& plan) {
  plan_ = indexed_lane_plan(plan, lanes_);
  plan_frozen_ = true;
}

void GapScheduler::teardown() {
  if (torn_down_) return;
  torn_down_ = true;
  if (device_backend_) {  // every enqueued step accounted, and done before its arena can go
    device_steps_.settle(true, accounting_);
    for (auto& owned : lanes_)
      if (owned->on_device && !owned->lane->abandoned()) owned->stream->synchronize();
  }
  for (auto& owned : lanes_) owned->teardown(logger_);
}

std::map<std::string, std::string> GapScheduler::save_lanes() { return save_lane_progress(lanes_, logger_); }

void GapScheduler::load_lanes(const std::map<std::string, std::string>& states) {
  load_lane_progress(lanes_, states, torn_down_, logger_);
}

StageLaneSummary GapScheduler::summary() const {
  StageLaneSummary out = accounting_.summary(lanes_);
  out.plan = plan();
  out.interference = interference_.estimate(options_.control_every);
  return out;
}

}  // namespace pipelane
