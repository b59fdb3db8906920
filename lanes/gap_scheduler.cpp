#include "lanes/gap_scheduler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "lanes/device_lane_thread.h"
#include "parallel/gap_fit.h"
#include "lanes/isolation/process_lane.h"
#include "lanes/isolation/thread_lane.h"

namespace pipelane {

struct GapScheduler::LaneSlot {
  std::string name;
  std::string work_unit;
  std::unique_ptr<GuardedLane> lane;
  LaneLimits limits;
  LaneOptions options;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Stream> stream;
  // A device lane (device backend, Lane::runs_on_device): its steps are timed by events on its
  // stream against `origin`, recorded there at start and seen complete at origin_s.
  bool on_device = false;
  std::unique_ptr<Event> origin;
  double origin_s = 0;
  std::vector<std::pair<double, bool>> calibration_device;  // event seconds, did work
  std::string output_dir;
  std::unique_ptr<LaneContext> ctx;
  bool set_up = false;
  bool torn_down = false;
  bool quarantined = false;
  bool finished = false;  // cached once finished() said so
  std::string reason;
  bool has_cost = false;
  double calibrated_s = 0;
  // The cost prediction comes from steps that did work: a lane with nothing to do yet (a prefill
  // queue before the first request) returns at once, and that is no measure of a real step.
  bool cost_from_work = false;
  // The last runaway_window steps in gaps: late or not (a ring), and how many were.
  std::vector<char> late;
  std::size_t late_next = 0;
  std::size_t late_seen = 0;
  int late_count = 0;
  double predicted_s = 0;
  double own_predicted_s = 0;  // EWMA of its own time where it ran (LaneStepCost::wall_s)
  std::vector<double> calibration_own_s;
  // Accounting of steps inside gaps (calibration counted apart).
  double units = 0;
  long steps = 0;
  double lane_s = 0;
  double harvested_s = 0;
  double overrun_s = 0;
  double calibration_units = 0;
  long calibration_steps = 0;
  double calibration_s = 0;

  void count_step(bool calibration, double step_units) {
    if (calibration) {
      calibration_units += step_units;
      ++calibration_steps;
    } else {
      units += step_units;
      ++steps;
    }
  }

  // Set on the host thread when a step failed (the lane is quarantined once the scheduler sees
  // it) and by quarantine(): steps posted after it do not run.
  std::atomic<bool> stopped{false};
  // Device steps posted, and returned on the host thread (the difference: its backlog).
  long posted_steps = 0;
  std::atomic<long> returned_steps{0};
  bool told_backlog = false;
  long backlog_skipped_steps = 0;  // planned device steps that gaps skipped for the backlog
  // A device lane's host thread (device_lane_thread.h): its steps run there, posted by fill().
  // Declared last: joined before the lane, context, arena and stream its tasks use go.
  std::unique_ptr<DeviceLaneThread> host_thread;

  // Returns once no posted step of this lane runs (see DeviceLaneThread::wait_idle).
  void quiesce() {
    if (host_thread) host_thread->wait_idle();
  }
};

// A device lane's step, posted to the lane's host thread, run there between two events on its
// stream, and accounted once its host part has returned and its events have completed.
struct GapScheduler::DeviceStep {
  LaneSlot* slot = nullptr;
  // Written on the lane's host thread before `returned` is set, read by the scheduler after.
  std::unique_ptr<Event> start, end;
  bool ran = false;       // false: not run (the lane had finished, or failed before)
  bool timed = false;     // both events recorded around it
  bool finished = false;  // the lane's finished() after it
  std::string failure;    // the quarantine reason; "" when it succeeded
  std::atomic<bool> returned{false};
  LaneStepRecord record;  // units from the step, start_s/end_s from the events
  // The gap it was enqueued in (set when fill() returns; calibration steps have gap_id -1).
  double gap_start_s = 0, gap_arrived_s = 0;
  bool profiling = false;
  std::size_t gap_record = static_cast<std::size_t>(-1);  // its GapRecord in gaps_, if kept
};

namespace {

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::uint64_t lane_seed(std::uint64_t seed, const std::string& name, int rank) {
  // splitmix64 of the mix, so neighbouring ranks/seeds give unrelated streams.
  std::uint64_t z = seed ^ fnv1a(name) ^ (static_cast<std::uint64_t>(rank) * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

constexpr double kMinStepCost = 1e-6;  // a planned step never counts as free
constexpr std::size_t kMaxPlannedStepsPerGap = 100000;

// Calls the lane's step(); returns what went wrong as the lane's quarantine reason ("" when the
// step succeeded, its units in *units).
std::string call_step(GuardedLane& lane, LaneContext& ctx, double* units) {
  try {
    *units = lane.step(ctx);
    return "";
  } catch (const LaneTimeout& error) {  // the host's own sentence (deadline, what was killed)
    return error.what();
  } catch (const LaneCrash& error) {
    return error.what();
  } catch (const ArenaQuotaError& error) {
    return "went past its arena quota: " + std::string(error.what());
  } catch (const LaneError& error) {
    return "step failed: " + std::string(error.what());
  } catch (const std::exception& error) {
    return "step threw: " + std::string(error.what());
  } catch (...) {
    return "step threw a non-standard exception";
  }
}

}  // namespace

std::vector<LaneSpec> make_lane_specs(const LaneRegistry& registry, const std::vector<std::string>& names,
                                      const std::map<std::string, std::map<std::string, std::string>>& sections,
                                      const std::string& source, const LaneIsolationOptions& isolation) {
  using Mode = LaneIsolationOptions::Mode;
  std::vector<LaneSpec> specs;
  for (const std::string& name : names) {
    const auto section = sections.find(name);
    const LaneRegistry::WorkerPlugin* worker_plugin = registry.worker_plugin(name);
    const std::string plugin = registry.plugin_path(name);
    // Untrusted code (a plugin, an arbitrary command) gets a worker unless told otherwise; a plugin
    // that was only described by a worker has no other place to run.
    const bool in_worker = worker_plugin || isolation.mode == Mode::Process ||
                           (isolation.mode == Mode::Auto && (!plugin.empty() || name == "command"));
    std::unique_ptr<Lane> lane;
    if (in_worker) {
      LaneWorkerLaunch launch;
      launch.command = isolation.worker_command;
      launch.plugin_path = plugin;
      launch.threads = isolation.worker_threads;
      launch.allow_child_processes = plugin.empty();  // a built-in's processes are its work (command)
      std::string work_unit;
      if (worker_plugin) {
        work_unit = worker_plugin->work_unit;
      } else {
        work_unit = registry.create(name)->work_unit();
      }
      lane = std::make_unique<ProcessLane>(name, work_unit, std::move(launch));
    } else {
      lane = registry.create(name);
    }
    specs.push_back({std::move(lane),
                     LaneOptions(name, section == sections.end() ? std::map<std::string, std::string>{} : section->second,
                                 source)});
  }
  return specs;
}

LaneIsolationOptions::Mode parse_isolation_mode(const std::string& text) {
  if (text == "auto") return LaneIsolationOptions::Mode::Auto;
  if (text == "thread") return LaneIsolationOptions::Mode::Thread;
  if (text == "process") return LaneIsolationOptions::Mode::Process;
  throw LaneError("[lanes] isolation = '" + text + "': expected auto, thread or process");
}

GapScheduler::GapScheduler(Backend& backend, std::vector<LaneSpec> lanes, GapSchedulerOptions options,
                           std::chrono::steady_clock::time_point origin, Logger logger, Clock clock)
    : backend_(backend), device_backend_(backend.kind() != DeviceKind::Cpu), options_(std::move(options)),
      clock_(std::move(clock)) {
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
    auto slot = std::make_unique<LaneSlot>();
    slot->name = spec.lane->name();
    if (find(slot->name)) throw LaneError("lane '" + slot->name + "' given twice");
    slot->work_unit = spec.lane->work_unit();
    slot->on_device = device_backend_ && spec.lane->runs_on_device();
    if (dynamic_cast<GuardedLane*>(spec.lane.get()))
      slot->lane.reset(static_cast<GuardedLane*>(spec.lane.release()));
    else
      slot->lane = std::make_unique<ThreadLane>(std::move(spec.lane));
    slot->limits.call_deadline_s = options_.call_deadline_s;
    slot->limits.output_bytes = options_.lane_output_bytes;
    slot->lane->set_limits(slot->limits);
    slot->late.assign(static_cast<std::size_t>(std::max(1, options_.runaway_window)), 0);
    slot->options = std::move(spec.options);
    std::string arena_name = "lane " + slot->name + " stage " + std::to_string(options_.stage);
    if (!device_backend_)  // the CPU backend: its "device" memory is host memory
      slot->arena = backend_.create_arena(std::move(arena_name), options_.lane_memory_bytes, MemoryKind::Device);
    else if (slot->on_device)  // the pool refuses past the quota too
      slot->arena = backend_.create_arena(std::move(arena_name), options_.lane_memory_bytes, MemoryKind::DevicePool);
    else  // its code dereferences its memory on the CPU
      slot->arena = std::make_unique<Arena>(std::move(arena_name), options_.lane_memory_bytes);
    slot->stream = backend_.create_stream(StreamPriority::Low);
    if (slot->on_device) {
      slot->host_thread = std::make_unique<DeviceLaneThread>();
      slot->origin = backend_.create_event();
      slot->origin->record(*slot->stream);
      slot->origin->synchronize();
      slot->origin_s = clock_();
    }
    if (!options_.output_root.empty())
      slot->output_dir = (std::filesystem::path(options_.output_root) / slot->name /
                          ("rank" + std::to_string(options_.rank))).string();
    slot->ctx.reset(new LaneContext{backend_, *slot->stream, *slot->arena, slot->options, slot->output_dir,
                                    options_.rank, lane_seed(options_.seed, slot->name, options_.rank),
                                    options_.world_size, options_.instance_index, options_.instance_count});
    lanes_.push_back(std::move(slot));
  }
}

GapScheduler::~GapScheduler() {
  teardown();
  // A lane abandoned past its deadline still runs on its thread, with references into its slot
  // (context, arena, options): those must never be freed.
  for (auto& slot : lanes_)
    if (slot->lane->abandoned()) (void)slot.release();
}

GapScheduler::LaneSlot* GapScheduler::find(const std::string& name) {
  for (auto& slot : lanes_)
    if (slot->name == name) return slot.get();
  return nullptr;
}
const GapScheduler::LaneSlot* GapScheduler::find(const std::string& name) const {
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
  return slot && slot->quarantined;
}

double GapScheduler::predicted_gap_s(int gap_id) const {
  const auto it = gap_ewma_.find(gap_id);
  return it == gap_ewma_.end() ? 0 : it->second;
}

double GapScheduler::predicted_step_s(const std::string& lane) const {
  const LaneSlot* slot = find(lane);
  return slot && slot->has_cost ? slot->predicted_s : 0;
}

void GapScheduler::quarantine(LaneSlot& slot, const std::string& reason) {
  if (slot.quarantined) return;
  slot.quarantined = true;
  slot.reason = reason;
  // Steps still posted do not run; the one running (if any) ends within its deadline.
  slot.stopped = true;
  slot.quiesce();
  if (slot.set_up && !slot.torn_down) {
    slot.torn_down = true;
    try {
      slot.lane->teardown(*slot.ctx);
    } catch (const std::exception& error) {
      slot.reason += " (teardown also failed: " + std::string(error.what()) + ")";
    } catch (...) {
      slot.reason += " (teardown also failed)";
    }
  }
  logger_("lane '" + slot.name + "' quarantined: " + slot.reason + "; training continues without it");
}

bool GapScheduler::ensure_setup(LaneSlot& slot) {
  if (slot.set_up) return !slot.quarantined;
  if (slot.quarantined || torn_down_) return false;
  try {
    if (!slot.output_dir.empty()) std::filesystem::create_directories(slot.output_dir);
    slot.set_up = true;  // teardown() is owed from here on, even if setup() throws half-way
    slot.lane->set_limits(slot.limits);
    slot.lane->setup(*slot.ctx);
  } catch (const LaneTimeout& error) {
    quarantine(slot, error.what());
  } catch (const LaneCrash& error) {
    quarantine(slot, error.what());
  } catch (const ArenaQuotaError& error) {
    quarantine(slot, "setup went past its arena quota: " + std::string(error.what()));
  } catch (const LaneError& error) {
    quarantine(slot, "setup failed: " + std::string(error.what()));
  } catch (const std::exception& error) {
    quarantine(slot, "setup threw: " + std::string(error.what()));
  } catch (...) {
    quarantine(slot, "setup threw a non-standard exception");
  }
  return !slot.quarantined;
}

bool GapScheduler::schedulable(const LaneSlot& slot) const {
  return slot.set_up && !slot.quarantined && !slot.torn_down && !slot.finished && slot.has_cost;
}

bool GapScheduler::runaway(LaneSlot& slot, int gap_id, double duration, double predicted, bool did_work,
                           std::string* reason) {
  // The lane's own time and its own prediction (see lane_timing), else the scheduler's.
  double own = duration, reference = predicted;
  LaneStepCost cost;
  if (options_.lane_timing) {
    cost = slot.lane->last_step_cost();
    // Less the time it waited for a CPU: that was the machine. Never less than the CPU time it
    // used: the run-queue clock can run ahead on a virtual machine whose CPUs' clocks differ.
    if (cost.wall_s > 0) own = std::max(cost.cpu_s, cost.wall_s - std::max(0.0, cost.waiting_s));
    if (slot.own_predicted_s > 0) reference = slot.own_predicted_s;
  }
  const double bound = options_.quarantine_factor * reference;
  const bool outlier = gap_id >= 0 && slot.cost_from_work && reference > 0 &&
                       is_runaway_step(own, reference, options_.quarantine_factor, options_.quarantine_min_s);
  // Without a run-queue clock: taken off the CPU while its own work stayed within bounds.
  const bool preempted = options_.lane_timing && cost.waiting_s < 0 && cost.involuntary_switches > 0 &&
                         cost.cpu_s <= bound;
  if (gap_id < 0) {  // calibration: measured (its median starts the prediction), not judged
    if (did_work) slot.calibration_own_s.push_back(own);
    return false;
  }
  if (did_work && !outlier && own > 0) {  // the lane's own cost, kept for judging its next steps
    slot.own_predicted_s = slot.own_predicted_s > 0
                               ? options_.ewma_alpha * own + (1 - options_.ewma_alpha) * slot.own_predicted_s
                               : own;
  }
  const bool late = outlier && !preempted;
  const std::size_t window = slot.late.size();
  slot.late_count += (late ? 1 : 0) - slot.late[slot.late_next];
  slot.late[slot.late_next] = late ? 1 : 0;
  slot.late_next = (slot.late_next + 1) % window;
  slot.late_seen = std::min(slot.late_seen + 1, window);
  if (late && slot.late_count >= options_.runaway_limit) {
    char text[240];
    std::snprintf(text, sizeof text, "%d of its last %zu steps took more than %gx the predicted %.6g s (the last %.6g s)",
                  slot.late_count, slot.late_seen, options_.quarantine_factor, reference, own);
    *reason = text;
  }
  return outlier;
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
  const bool outlier = failure.empty() && runaway(slot, gap_id, duration, predicted, units > 0, &failure);
  if (!failure.empty()) {
    quarantine(slot, failure);
    return false;
  }
  // A spike, the lane's or the machine's (a hand-over that waited for a CPU), is no measure of the
  // next step: one in the prediction could keep the lane out of every gap, and a lane that does
  // not fit is never measured again.
  const bool spike = outlier || (slot.cost_from_work && duration > options_.quarantine_factor * slot.predicted_s);
  if (units > 0 && !spike) {
    if (!slot.cost_from_work) {
      slot.predicted_s = std::max(duration, kMinStepCost);
      slot.cost_from_work = slot.has_cost = true;
    } else {
      slot.predicted_s = options_.ewma_alpha * duration + (1 - options_.ewma_alpha) * slot.predicted_s;
    }
  }
  slot.finished = slot.lane->finished();  // the host's answer from the step: no lane code runs here
  return true;
}

void GapScheduler::enqueue_device_step(LaneSlot& slot, int iteration, int gap_id, WaitKind kind, double predicted) {
  // The deadline bounds the host's part (enqueueing, and the lane's own waits on its stream).
  LaneLimits limits = slot.limits;
  limits.step_deadline_s = gap_id < 0 ? options_.call_deadline_s
                                      : std::max(options_.step_deadline_factor * predicted, options_.step_deadline_min_s);
  ++slot.posted_steps;
  auto owned = std::make_unique<DeviceStep>();
  DeviceStep& step = *owned;
  step.slot = &slot;
  step.record = {iteration, gap_id, kind, slot.name, 0, 0, 0};
  device_steps_.push_back(std::move(owned));
  Backend& backend = backend_;
  slot.host_thread->post([&backend, &slot, &step, limits] {
    if (!slot.stopped && !slot.lane->finished()) {
      step.ran = true;
      try {
        step.start = backend.create_event();  // here: the device is set on the thread that records
        step.end = backend.create_event();
        slot.lane->set_limits(limits);
        step.start->record(*slot.stream);
        double units = 0;
        step.failure = call_step(*slot.lane, *slot.ctx, &units);
        step.end->record(*slot.stream);
        step.timed = true;
        // Kept even when it failed: the time was spent either way (units count only on success).
        if (step.failure.empty()) step.record.units = units;
        step.finished = slot.lane->finished();
      } catch (const std::exception& error) {  // the device refused an event
        step.failure = "its step's events failed: " + std::string(error.what());
      } catch (...) {
        step.failure = "its step's events failed";
      }
      if (!step.failure.empty()) slot.stopped = true;
    }
    ++slot.returned_steps;
    step.returned.store(true, std::memory_order_release);  // the last touch: the step may go now
  });
}

bool GapScheduler::device_backlog_full(LaneSlot& slot) {
  const long limit = options_.max_device_backlog_steps;
  if (limit <= 0 || slot.posted_steps - slot.returned_steps < limit) return false;
  if (!slot.told_backlog) {
    slot.told_backlog = true;
    logger_("lane '" + slot.name + "' has " + std::to_string(limit) +
            " device steps still to run: it cannot keep up with its gaps, so gaps skip its steps until it catches up");
  }
  return true;
}

void GapScheduler::settle_device_steps(bool wait) {
  std::size_t done = 0;
  for (; done < device_steps_.size(); ++done) {
    DeviceStep& d = *device_steps_[done];
    LaneSlot& slot = *d.slot;
    if (!d.returned.load(std::memory_order_acquire)) {
      if (!wait) break;  // in posting order: the rest at a later call
      slot.quiesce();
    }
    if (!d.ran) {  // posted after the lane finished or failed: no step
      if (d.gap_record < gaps_.size()) --gaps_[d.gap_record].lane_steps;
      continue;
    }
    if (d.timed) {
      if (wait)
        d.end->synchronize();
      else if (!d.end->query())
        break;
      account_device_step(d);
    }
    if (d.failure.empty()) {
      slot.count_step(d.record.gap_id < 0, d.record.units);
      slot.finished = d.finished;
    }
    keep_records({d.record});
    if (!d.failure.empty()) quarantine(slot, d.failure);
  }
  device_steps_.erase(device_steps_.begin(), device_steps_.begin() + static_cast<std::ptrdiff_t>(done));
}

void GapScheduler::account_device_step(DeviceStep& d) {
  LaneSlot& slot = *d.slot;
  d.record.start_s = slot.origin_s + d.start->elapsed_ms_since(*slot.origin) * 1e-3;
  d.record.end_s = slot.origin_s + d.end->elapsed_ms_since(*slot.origin) * 1e-3;
  const double duration = std::max(0.0, d.record.end_s - d.record.start_s);
  const bool did_work = d.record.units > 0;
  if (d.record.gap_id < 0) {
    slot.calibration_s += duration;
    slot.calibration_device.emplace_back(duration, did_work);
    return;
  }
  // On the device a step may start before the gap (queued behind earlier lane work) or after
  // the arrival: only its overlap with [gap start, arrival] is harvest.
  const double inside =
      std::max(0.0, std::min(d.record.end_s, d.gap_arrived_s) - std::max(d.record.start_s, d.gap_start_s));
  const double after = std::max(0.0, d.record.end_s - std::max(d.record.start_s, d.gap_arrived_s));
  slot.lane_s += duration;
  slot.harvested_s += inside;
  slot.overrun_s += after;
  if (d.gap_record < gaps_.size()) gaps_[d.gap_record].harvested_s += inside;
  if (!d.profiling) gap_totals_.harvested_after_profiling_s += inside;
  if (did_work) {  // what the summary predicts; the plan's counts stay as frozen
    slot.predicted_s = slot.cost_from_work
                           ? options_.ewma_alpha * duration + (1 - options_.ewma_alpha) * slot.predicted_s
                           : std::max(duration, kMinStepCost);
    slot.cost_from_work = slot.has_cost = true;
  }
}

void GapScheduler::keep_records(const std::vector<LaneStepRecord>& steps) {
  for (const LaneStepRecord& step : steps)
    if (steps_.size() < options_.max_records) steps_.push_back(step);
}

std::map<std::string, double> GapScheduler::calibrate() {
  std::map<std::string, double> costs;
  for (auto& owned : lanes_) {
    LaneSlot& slot = *owned;
    if (!ensure_setup(slot)) continue;
    slot.finished = slot.lane->finished();
    std::vector<double> durations, productive;
    if (slot.on_device) {  // the steps' event times, waited for (before training starts)
      for (int k = 0; k < options_.calibration_steps && !slot.finished; ++k)
        enqueue_device_step(slot, -1, -1, WaitKind::None, 0);
      settle_device_steps(true);
      for (const auto& [seconds, did_work] : slot.calibration_device) {
        durations.push_back(seconds);
        if (did_work) productive.push_back(seconds);
      }
    }
    for (int k = 0; k < options_.calibration_steps && !slot.finished && !slot.on_device; ++k) {
      recent_.clear();
      const bool ok = run_step(slot, -1, -1, WaitKind::None, 0);
      keep_records(recent_);
      if (!ok) break;
      durations.push_back(recent_.back().end_s - recent_.back().start_s);
      slot.calibration_s += durations.back();
      if (recent_.back().units > 0) productive.push_back(durations.back());
    }
    if (slot.quarantined) continue;
    // The median: a lane's first steps pay for warming up (page faults, first-use setup).
    if (!slot.calibration_own_s.empty()) slot.own_predicted_s = median(slot.calibration_own_s);
    if (!durations.empty()) {
      slot.calibrated_s = slot.predicted_s =
          std::max(median(productive.empty() ? durations : productive), kMinStepCost);
      slot.has_cost = true;
      slot.cost_from_work = !productive.empty();
    }
    costs[slot.name] = slot.calibrated_s;
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
  bool seen = false;
  // A poll with nothing run since the previous one: the arrival time is that poll's.
  const auto poll_idle = [&] {
    if (!seen && arrived()) {
      seen = true;
      record.arrived_s = clock_();
      record.arrived_exact = true;
    }
    return seen;
  };
  // A poll right after a lane step [s, e]: the arrival happened during the step (see GapRecord).
  const auto poll_after_step = [&](double s, double e) {
    if (!seen && arrived()) {
      seen = true;
      record.arrived_exact = false;
      record.arrived_s = 0.5 * (s + e);
    }
    return seen;
  };

  const bool profiling = completed_iterations_ < options_.profile_iterations;
  record.profiling = profiling;
  if (!calibrated_ && !warned_uncalibrated_ && !lanes_.empty()) {
    warned_uncalibrated_ = true;
    logger_("GapScheduler::calibrate() was not called before training; lanes stay idle until it is");
  }
  if (device_backend_) settle_device_steps(false);
  const std::size_t first_device_step = device_steps_.size();
  if (!profiling && calibrated_ && !torn_down_ && !lanes_.empty()) {
    // Deterministic mode, and device lanes always: the frozen sequence, whatever arrived() says;
    // polls only time the arrival. Device steps are only enqueued (the plan puts them first).
    if (options_.deterministic || device_backend_) {
      const auto planned = plan_.find(gap_id);
      if (plan_frozen_ && planned != plan_.end()) {
        for (const std::size_t index : planned->second) {
          LaneSlot& slot = *lanes_[index];
          if (!schedulable(slot)) continue;
          if (slot.on_device) {
            if (device_backlog_full(slot))
              ++slot.backlog_skipped_steps;
            else
              enqueue_device_step(slot, iteration, gap_id, kind, slot.predicted_s);
            continue;
          }
          poll_idle();
          run_step(slot, iteration, gap_id, kind, slot.predicted_s);
          poll_after_step(recent_.back().start_s, recent_.back().end_s);
        }
      }
    }
    if (!options_.deterministic) {  // host lanes fitted to the measured time
      const double budget = gap_budget(predicted_gap, options_.margin);
      const auto host_cost = [&](std::size_t i) {
        const LaneSlot& slot = *lanes_[i];
        return schedulable(slot) && !slot.on_device ? std::optional(slot.predicted_s) : std::nullopt;
      };
      while (!poll_idle()) {
        const GapFitChoice choice =
            next_fitting_step(lanes_.size(), next_lane_, clock_() - record.start_s, budget, host_cost);
        if (!choice.found) break;
        next_lane_ = choice.cursor;
        LaneSlot* chosen = lanes_[choice.lane].get();
        run_step(*chosen, iteration, gap_id, kind, chosen->predicted_s);
        if (poll_after_step(recent_.back().start_s, recent_.back().end_s)) break;
      }
    }
  }
  while (!poll_idle()) std::this_thread::yield();
  record.end_s = clock_();
  record.lane_steps = static_cast<int>(recent_.size() + (device_steps_.size() - first_device_step));
  for (std::size_t i = first_device_step; i < device_steps_.size(); ++i) {
    DeviceStep& d = *device_steps_[i];
    d.gap_start_s = record.start_s;
    d.gap_arrived_s = record.arrived_s;
    d.profiling = record.profiling;
    if (gaps_.size() < options_.max_records) d.gap_record = gaps_.size();
  }

  for (const LaneStepRecord& step : recent_) {
    LaneSlot* slot = find(step.lane);
    const double inside = std::max(0.0, std::min(step.end_s, record.arrived_s) - step.start_s);
    const double after = std::max(0.0, step.end_s - std::max(step.start_s, record.arrived_s));
    slot->lane_s += step.end_s - step.start_s;
    slot->harvested_s += inside;
    slot->overrun_s += after;
    record.harvested_s += inside;
  }
  const double length = record.arrived_s - record.start_s;
  const auto previous = gap_ewma_.find(gap_id);
  gap_ewma_[gap_id] = previous == gap_ewma_.end()
                          ? length
                          : options_.ewma_alpha * length + (1 - options_.ewma_alpha) * previous->second;
  ++gap_totals_.count;
  gap_totals_.bubble_s += length;
  if (!record.profiling) {
    gap_totals_.bubble_after_profiling_s += length;
    gap_totals_.harvested_after_profiling_s += record.harvested_s;
  }
  keep_records(recent_);
  if (gaps_.size() < options_.max_records) gaps_.push_back(record);
}

void GapScheduler::end_iteration(int) {
  if (device_backend_) settle_device_steps(false);
  ++completed_iterations_;
  // Once the gaps are known: a lane whose step is longer than every gap's budget will never run
  // (its cost is only re-measured when it runs), which the user should hear about.
  if (completed_iterations_ == options_.profile_iterations && calibrated_ && !gap_ewma_.empty()) {
    double largest = 0;
    for (const auto& [gap_id, length] : gap_ewma_) largest = std::max(largest, length);
    for (const auto& owned : lanes_) {
      const LaneSlot& slot = *owned;
      if (slot.quarantined || slot.finished || !slot.has_cost) continue;
      if (slot.predicted_s > largest * options_.margin) {
        char text[320];
        std::snprintf(text, sizeof text,
                      "lane %s takes %.3g ms a step, more than the largest gap (%.3g ms x "
                      "margin %.2g): it will not run here; give it smaller steps",
                      slot.name.c_str(), slot.predicted_s * 1e3, largest * 1e3, options_.margin);
        logger_(text);
      }
    }
  }
  const bool device_lanes =
      std::any_of(lanes_.begin(), lanes_.end(), [](const auto& slot) { return slot->on_device; });
  if ((options_.deterministic || device_lanes) && !plan_frozen_ && calibrated_ &&
      completed_iterations_ >= options_.profile_iterations)
    freeze_plan();
}

void GapScheduler::freeze_plan() {
  plan_.clear();
  const std::size_t n = lanes_.size();
  // Device lanes fill the gap on the device, host lanes on the CPU: each kind is fitted into the
  // gap on its own, device steps first (they are only enqueued). Host lanes are planned only in
  // deterministic mode.
  std::size_t device_cursor = 0, cursor = 0;
  for (const auto& [gap_id, predicted_gap] : gap_ewma_) {  // ascending gap id: the order of the list
    std::vector<std::size_t>& sequence = plan_[gap_id];
    const double budget = gap_budget(predicted_gap, options_.margin);
    const auto fit = [&](bool device, std::size_t& lane_cursor) {
      const auto planned_cost = [&](std::size_t i) {
        const LaneSlot& slot = *lanes_[i];
        return schedulable(slot) && slot.on_device == device ? std::optional(std::max(slot.predicted_s, kMinStepCost))
                                                             : std::nullopt;
      };
      double elapsed = 0;
      const std::size_t limit =
          device && options_.max_device_steps_per_gap > 0
              ? std::min(kMaxPlannedStepsPerGap, static_cast<std::size_t>(options_.max_device_steps_per_gap))
              : kMaxPlannedStepsPerGap;
      while (sequence.size() < limit) {
        const GapFitChoice choice = next_fitting_step(n, lane_cursor, elapsed, budget, planned_cost);
        if (!choice.found) break;
        sequence.push_back(choice.lane);
        elapsed += *planned_cost(choice.lane);
        lane_cursor = choice.cursor;
      }
    };
    fit(true, device_cursor);
    if (options_.deterministic) fit(false, cursor);
  }
  plan_frozen_ = true;
}

LanePlan GapScheduler::plan() const {
  LanePlan named;
  for (const auto& [gap_id, sequence] : plan_) {
    std::vector<std::string>& names = named[gap_id];
    for (const std::size_t index : sequence) names.push_back(lanes_[index]->name);
  }
  return named;
}

void GapScheduler::set_plan(const LanePlan& plan) {
  std::map<int, std::vector<std::size_t>> indexed;
  for (const auto& [gap_id, names] : plan) {
    std::vector<std::size_t>& sequence = indexed[gap_id];
    for (const std::string& name : names) {
      std::size_t index = 0;
      while (index < lanes_.size() && lanes_[index]->name != name) ++index;
      if (index == lanes_.size())
        throw LaneError("lane plan: gap " + std::to_string(gap_id) + " names lane '" + name +
                        "', which does not run on this stage");
      sequence.push_back(index);
    }
  }
  plan_ = std::move(indexed);
  plan_frozen_ = true;
}

void GapScheduler::teardown() {
  if (torn_down_) return;
  torn_down_ = true;
  if (device_backend_) {  // every enqueued step accounted, and done before its arena can go
    settle_device_steps(true);
    for (auto& owned : lanes_)
      if (owned->on_device && !owned->lane->abandoned()) owned->stream->synchronize();
  }
  for (auto& owned : lanes_) {
    LaneSlot& slot = *owned;
    if (!slot.set_up || slot.torn_down) continue;
    slot.torn_down = true;
    try {
      slot.lane->teardown(*slot.ctx);
    } catch (const std::exception& error) {
      logger_("lane '" + slot.name + "': teardown failed: " + error.what());
    } catch (...) {
      logger_("lane '" + slot.name + "': teardown failed");
    }
  }
}

std::map<std::string, std::string> GapScheduler::save_lanes() {
  std::map<std::string, std::string> states;
  for (auto& owned : lanes_) {
    LaneSlot& slot = *owned;
    if (!slot.set_up || slot.quarantined) continue;
    slot.quiesce();  // a checkpoint holds every step posted before it
    try {
      states[slot.name] = slot.lane->save();
    } catch (const std::exception& error) {
      quarantine(slot, "save failed: " + std::string(error.what()));
    }
  }
  return states;
}

void GapScheduler::load_lanes(const std::map<std::string, std::string>& states) {
  for (const auto& [name, state] : states) {
    LaneSlot* slot = find(name);
    if (!slot) {
      logger_("saved progress of lane '" + name + "' ignored: the lane does not run here");
      continue;
    }
    if (!ensure_setup(*slot)) continue;
    slot->quiesce();
    try {
      slot->lane->load(state);
      slot->finished = slot->lane->finished();
    } catch (const LaneTimeout& error) {
      quarantine(*slot, error.what());
    } catch (const LaneCrash& error) {
      quarantine(*slot, error.what());
    } catch (const ArenaQuotaError& error) {
      quarantine(*slot, "load went past its arena quota: " + std::string(error.what()));
    } catch (const std::exception& error) {
      quarantine(*slot, "load failed: " + std::string(error.what()));
    }
  }
}

StageLaneSummary GapScheduler::summary() const {
  StageLaneSummary out;
  out.stage = options_.stage;
  out.rank = options_.rank;
  // From the running totals: the records themselves are only the first max_records.
  out.gaps = gap_totals_.count;
  out.bubble_s = gap_totals_.bubble_s;
  out.bubble_after_profiling_s = gap_totals_.bubble_after_profiling_s;
  out.harvested_after_profiling_s = gap_totals_.harvested_after_profiling_s;
  out.margin = options_.margin;
  out.deterministic = options_.deterministic;
  out.profile_iterations = options_.profile_iterations;
  for (const auto& owned : lanes_) {
    LaneSlot& slot = *owned;
    slot.quiesce();  // report() and the arena's high water: after the posted steps
    out.harvested_s += slot.harvested_s;
    out.overrun_s += slot.overrun_s;
    LaneStats& lane = out.lanes[slot.name];
    lane.work_unit = slot.work_unit;
    // The slot keeps gap steps and calibration steps apart; the lane's work is both.
    lane.units = slot.units + slot.calibration_units;
    lane.steps = slot.steps + slot.calibration_steps;
    lane.lane_s = slot.lane_s + slot.calibration_s;
    lane.calibration_units = slot.calibration_units;
    lane.calibration_steps = slot.calibration_steps;
    lane.harvested_s = slot.harvested_s;
    lane.overrun_s = slot.overrun_s;
    lane.calibrated_step_s = slot.calibrated_s;
    lane.predicted_step_s = slot.predicted_s;
    lane.finished = slot.finished;
    lane.quarantined = slot.quarantined;
    if (slot.quarantined) lane.quarantine_reason = slot.reason;
    lane.memory_high_water_bytes = slot.lane->memory_high_water();
    lane.isolation = isolation_name(slot.lane->isolation());
    lane.runs_on = slot.on_device ? "device" : "cpu";
    lane.backlog_skipped_steps = slot.backlog_skipped_steps;
    try {
      lane.report = slot.set_up ? slot.lane->report() : nlohmann::json(nullptr);
    } catch (const std::exception& error) {
      lane.report = {{"report_error", error.what()}};
    }
  }
  out.plan = plan();
  return out;
}

}  // namespace pipelane
