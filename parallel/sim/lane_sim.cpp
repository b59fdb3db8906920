#include "parallel/sim/lane_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "parallel/gap_fit.h"
#include "parallel/sim/distribution.h"

namespace pipelane::sim {

namespace {

double median_unsorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return median_of(v);
}

constexpr double kMinStepCost = 1e-6;  // the gap scheduler's floor on a calibrated cost

// Records one step in the lane's ring of its last `window` steps; returns how many of them were late.
int count_late_step(LaneTotals& t, bool late, int window) {
  if (t.late.empty()) t.late.assign(static_cast<std::size_t>(std::max(1, window)), 0);
  t.late_count += (late ? 1 : 0) - t.late[t.late_next];
  t.late[t.late_next] = late ? 1 : 0;
  t.late_next = (t.late_next + 1) % t.late.size();
  return t.late_count;
}

}  // namespace

double LaneModel::step_at(double u) const {
  if (step_s.empty()) throw std::logic_error("lane " + name + " has no step time");
  return draw_from(step_s, u);
}

double LaneModel::median_step_s() const { return median_of(step_s); }

double LaneModel::value_rate_units_per_s() const {
  return dedicated_units_per_s > 0 ? dedicated_units_per_s : units_per_step / median_step_s();
}

LaneSimulator::LaneSimulator(std::vector<LaneModel> lanes, std::vector<std::vector<bool>> runs_on,
                             LaneSimSettings settings)
    : lanes_(std::move(lanes)), runs_on_(std::move(runs_on)), settings_(settings) {
  if (!(settings_.margin > 0)) throw std::invalid_argument("lanes: margin must be > 0");
  for (const LaneModel& lane : lanes_) {
    if (lane.step_s.empty() || !(lane.step_s.front() > 0))
      throw std::invalid_argument("lane " + lane.name + ": its step time must be > 0");
    if (!std::is_sorted(lane.step_s.begin(), lane.step_s.end()))
      throw std::invalid_argument("lane " + lane.name + ": step times must be ascending");
  }
  const std::size_t n = lanes_.size();
  stages_.resize(runs_on_.size());
  totals_.assign(runs_on_.size(), std::vector<LaneTotals>(n));
  if (!(settings_.lane_gap_delay_s >= 0)) throw std::invalid_argument("lanes: lane_gap_delay_s must be >= 0");
  lane_gap_delay_s_.assign(runs_on_.size(), 0.0);
  lane_gaps_.assign(runs_on_.size(), 0);
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    StageState& st = stages_[s];
    if (runs_on_[s].size() != n) throw std::invalid_argument("lanes: runs_on needs one entry per lane");
    st.rng = UniformDraws(settings_.seed * 0x9E3779B97F4A7C15ull + s);
    st.predicted.assign(n, 0.0);
    st.replayed.assign(n, 0);
    for (std::size_t l = 0; l < n; ++l) st.replayed[l] = s * lanes_[l].step_sequence.size() / stages_.size();
    st.queue.resize(n);
    st.next_arrival.assign(n, std::numeric_limits<double>::infinity());
    // Calibration before training: the median of a few steps is the first prediction.
    for (std::size_t l = 0; l < n; ++l) {
      if (!runs_on_[s][l]) continue;
      std::vector<double> samples;
      for (int k = 0; k < std::max(1, settings_.calibration_steps); ++k)
        samples.push_back(next_step_s(static_cast<int>(s), l));
      st.predicted[l] = std::max(median_unsorted(samples), kMinStepCost);
      totals_[s][l].calibrated_step_s = st.predicted[l];
      if (lanes_[l].requests_per_s > 0) st.next_arrival[l] = -std::log(1 - draw(st)) / lanes_[l].requests_per_s;
    }
  }
}

double LaneSimulator::draw(StageState& st) { return st.rng.next(); }

double LaneSimulator::next_step_s(int stage, std::size_t lane) {
  StageState& st = stages_[stage];
  const std::vector<double>& sequence = lanes_[lane].step_sequence;
  if (sequence.empty()) return lanes_[lane].step_at(draw(st));
  return sequence[st.replayed[lane]++ % sequence.size()];
}

void LaneSimulator::arrivals_until(int stage, double job_s) {
  StageState& st = stages_[stage];
  for (std::size_t l = 0; l < lanes_.size(); ++l)
    while (st.next_arrival[l] <= job_s) {
      st.queue[l].push_back(st.next_arrival[l]);
      st.next_arrival[l] += -std::log(1 - draw(st)) / lanes_[l].requests_per_s;
    }
}

void LaneSimulator::start_iteration(int iteration, double offset_s) {
  iteration_ = iteration;
  offset_s_ = offset_s;
}

double LaneSimulator::fill(int stage, int index, WaitKind kind, double start_s, double ready_s) {
  StageState& st = stages_[stage];
  const std::size_t n = lanes_.size();
  const bool profiling = iteration_ < settings_.profile_iterations;
  const auto ewma = st.gap_ewma.find(index);
  const double predicted_gap = ewma == st.gap_ewma.end() ? 0.0 : ewma->second;
  const std::size_t first_step = steps_.size();
  double t = start_s, arrived = ready_s;
  bool arrived_during_step = false;

  const auto is_service = [&](std::size_t l) { return lanes_[l].requests_per_s > 0; };
  const auto has_work = [&](std::size_t l) {
    if (!is_service(l)) return true;
    arrivals_until(stage, offset_s_ + t);
    return !st.queue[l].empty();
  };
  if (!profiling && n > 0) {
    const double budget = gap_budget(predicted_gap, settings_.margin);
    while (t < ready_s) {
      const GapFitChoice choice = next_fitting_step(n, st.cursor, t - start_s, budget, [&](std::size_t l) {
        return runs_on_[stage][l] && !totals_[stage][l].quarantined && has_work(l) ? std::optional(st.predicted[l])
                                                                                   : std::nullopt;
      });
      if (!choice.found) {
        // A service with nothing queued polls: it takes the next request that arrives while a
        // step still fits before the budget ends (and before the data is there).
        double next = std::numeric_limits<double>::infinity();
        for (std::size_t l = 0; l < n; ++l)
          if (runs_on_[stage][l] && !totals_[stage][l].quarantined && is_service(l) &&
              st.next_arrival[l] - offset_s_ - start_s + st.predicted[l] <= budget)
            next = std::min(next, st.next_arrival[l] - offset_s_);
        if (!(next < ready_s)) break;
        t = std::max(t, next);
        continue;
      }
      st.cursor = choice.cursor;
      const std::size_t l = choice.lane;
      const double duration = next_step_s(stage, l);
      const double s = t, e = t + duration;
      steps_.push_back({iteration_, stage, index, static_cast<int>(l), kind, s, e, lanes_[l].units_per_step});
      if (is_service(l)) {
        served_.push_back({stage, static_cast<int>(l), st.queue[l].front(), offset_s_ + e});
        st.queue[l].erase(st.queue[l].begin());
      }
      LaneTotals& lane_totals = totals_[stage][l];
      const bool runaway = is_runaway_step(duration, st.predicted[l], settings_.quarantine_factor,
                                           settings_.quarantine_min_s);
      const int late = count_late_step(lane_totals, runaway, settings_.runaway_window);
      if (runaway && late >= settings_.runaway_limit) {
        lane_totals.quarantined = true;
        lane_totals.quarantined_at = iteration_;
      }
      if (!runaway) st.predicted[l] = settings_.ewma_alpha * duration + (1 - settings_.ewma_alpha) * st.predicted[l];
      t = e;
      if (ready_s <= e) {
        // The poll after a step sees the arrival; like the gap scheduler, the arrival is
        // estimated at the step's midpoint (it cannot know when during the step it came).
        arrived = 0.5 * (s + e);
        arrived_during_step = true;
        break;
      }
    }
  }
  if (!arrived_during_step) arrived = ready_s;  // idle polls see it when it comes
  double resume = std::max(t, ready_s);
  if (steps_.size() > first_step) {
    // The lane that ran last still has blocks on the SMs: training's next kernel waits half a block.
    const std::size_t last = static_cast<std::size_t>(steps_.back().lane);
    const double delay = 0.5 * lanes_[last].kernel_block_s;
    resume += delay;
    totals_[stage][last].interference_s += delay;
  }
  if (!profiling && std::find(runs_on_[stage].begin(), runs_on_[stage].end(), true) != runs_on_[stage].end()) {
    ++lane_gaps_[stage];
    resume += settings_.lane_gap_delay_s;
    lane_gap_delay_s_[stage] += settings_.lane_gap_delay_s;
  }

  SimGap gap{iteration_, stage, index, kind, start_s, arrived, resume, profiling, 0.0};
  for (std::size_t i = first_step; i < steps_.size(); ++i) {
    const SimLaneStep& step = steps_[i];
    LaneTotals& total = totals_[stage][step.lane];
    const double inside = std::max(0.0, std::min(step.end_s, arrived) - step.start_s);
    total.units += step.units;
    total.lane_s += step.end_s - step.start_s;
    total.harvested_s += inside;
    total.overrun_s += std::max(0.0, step.end_s - std::max(step.start_s, arrived));
    ++total.steps;
    gap.harvested_s += inside;
  }
  for (std::size_t l = 0; l < n; ++l) totals_[stage][l].predicted_step_s = st.predicted[l];
  const double length = arrived - start_s;
  st.gap_ewma[index] = ewma == st.gap_ewma.end()
                           ? length
                           : settings_.ewma_alpha * length + (1 - settings_.ewma_alpha) * predicted_gap;
  gaps_.push_back(gap);
  return resume;
}

std::vector<SimRequest> LaneSimulator::requests(double until_s) {
  std::vector<SimRequest> out = served_;
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    arrivals_until(static_cast<int>(s), until_s);
    for (std::size_t l = 0; l < lanes_.size(); ++l)
      for (double arrival : stages_[s].queue[l])
        if (arrival < until_s) out.push_back({static_cast<int>(s), static_cast<int>(l), arrival, -1.0});
  }
  return out;
}

}  // namespace pipelane::sim
