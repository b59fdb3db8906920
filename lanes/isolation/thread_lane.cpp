#include "lanes/isolation/thread_lane.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "lanes/isolation/output_quota.h"
#include "lanes/isolation/step_timer.h"
#include "lanes/isolation/fp_environment.h"

namespace pipelane {
struct ThreadLane::Results {
  double units = 0;
  bool finished = false;
  LaneStepCost cost;
  std::string text;
  nlohmann::json report;
  OutputQuota output_quota;
  StepTimer timer;  // used on the lane's thread only
};

// Shared by the caller and the thread, so it outlives a ThreadLane whose thread was abandoned.
namespace {

// SIGTERM and SIGUSR1 are training's (trainer/run/preemption.h: its own thread takes them, so a
// lane that ignores or catches them cannot stop the checkpoint): never delivered to a lane thread.
void block_training_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

}  // namespace

struct ThreadLane::Host {
  std::unique_ptr<Lane> lane;
  std::mutex mutex;
  std::condition_variable cv;
  std::function<void(Lane&, Results&)> task;
  bool pending = false;  // a task is posted and not done
  bool quit = false;
  std::exception_ptr error;
  Results results;
  std::thread thread;

  // Started from the caller's thread: it inherits that thread's floating-point environment
  // (training's), which every call then starts from.
  static void run(std::shared_ptr<Host> host) {
    const FloatingPointEnvironment clean = FloatingPointEnvironment::capture();
    std::unique_lock<std::mutex> lock(host->mutex);
    for (;;) {
      host->cv.wait(lock, [&] { return host->pending || host->quit; });
      if (!host->pending) break;
      std::function<void(Lane&, Results&)> task = host->task;
      lock.unlock();
      block_training_signals();  // again: the lane's code may have unblocked them on this thread
      std::exception_ptr error;
      try {
        task(*host->lane, host->results);
      } catch (...) {
        error = std::current_exception();
      }
      clean.restore();
      block_training_signals();  // and after: between calls too, this thread never takes them
      lock.lock();
      host->error = error;
      host->pending = false;
      host->cv.notify_all();
      if (host->quit) break;
    }
  }
};

const char* isolation_name(LaneIsolation isolation) {
  return isolation == LaneIsolation::Process ? "process" : "thread";
}

ThreadLane::ThreadLane(std::unique_ptr<Lane> lane) : host_(std::make_shared<Host>()) {
  if (!lane) throw LaneError("ThreadLane: no lane");
  name_ = lane->name();
  work_unit_ = lane->work_unit();
  host_->lane = std::move(lane);
}

ThreadLane::~ThreadLane() { stop_thread(); }

void ThreadLane::stop_thread() const {
  if (abandoned_ || !host_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(host_->mutex);
    host_->quit = true;
  }
  host_->cv.notify_all();
  host_->thread.join();
}

void ThreadLane::call(double deadline_s, const char* what, std::function<void(Lane&, Results&)> task) const {
  if (abandoned_) throw LaneError(std::string(what) + ": the lane's thread was abandoned");
  if (thread_done_) throw LaneError(std::string(what) + ": the lane was torn down");
  if (!host_->thread.joinable())
    host_->thread = std::thread(&Host::run, host_);
  std::unique_lock<std::mutex> lock(host_->mutex);
  host_->task = std::move(task);
  host_->pending = true;
  host_->cv.notify_all();
  const auto done = [&] { return !host_->pending; };
  if (deadline_s > 0) {
    if (!host_->cv.wait_for(lock, std::chrono::duration<double>(deadline_s), done)) {
      // The call cannot be stopped: leave it running, and never touch its lane again.
      abandoned_ = thread_done_ = true;
      host_->quit = true;
      lock.unlock();
      host_->thread.detach();
      char text[256];
      std::snprintf(text, sizeof text,
                    "%s did not return within its deadline of %.3g s; an in-process lane cannot be stopped, so "
                    "its thread was left running (isolation = process would have killed it)",
                    what, deadline_s);
      throw LaneTimeout(text);
    }
  } else {
    host_->cv.wait(lock, done);
  }
  std::exception_ptr error = host_->error;
  host_->error = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

void ThreadLane::setup(LaneContext& ctx) {
  ctx_ = &ctx;
  LaneContext* c = &ctx;
  const OutputQuota quota(ctx.output_dir, limits_.output_bytes);
  call(limits_.call_deadline_s, "setup", [c, quota](Lane& lane, Results& r) {
    r.output_quota = quota;
    lane.setup(*c);
    r.finished = lane.finished();
  });
  finished_ = host_->results.finished;
  memory_high_water_ = ctx.arena.high_water();
}

double ThreadLane::step(LaneContext& ctx) {
  LaneContext* c = &ctx;
  try {
    call(limits_.step_deadline_s, "step", [c](Lane& lane, Results& r) {
      r.timer.start();
      r.units = 0;
      try {
        r.units = lane.step(*c);
        r.finished = lane.finished();
      } catch (...) {
        r.cost = r.timer.stop();
        throw;
      }
      r.cost = r.timer.stop();
      r.output_quota.check(r.finished);  // a finished lane is not stepped again: last look
    });
  } catch (...) {
    if (!abandoned_) cost_ = host_->results.cost;
    memory_high_water_ = std::max(memory_high_water_, ctx.arena.high_water());
    throw;
  }
  cost_ = host_->results.cost;
  finished_ = host_->results.finished;
  memory_high_water_ = std::max(memory_high_water_, ctx.arena.high_water());
  return host_->results.units;
}

std::string ThreadLane::save() const {
  call(limits_.call_deadline_s, "save", [](Lane& lane, Results& r) { r.text = lane.save(); });
  return host_->results.text;
}

void ThreadLane::load(const std::string& state) {
  call(limits_.call_deadline_s, "load", [state](Lane& lane, Results& r) {
    lane.load(state);
    r.finished = lane.finished();
  });
  finished_ = host_->results.finished;
  if (ctx_) memory_high_water_ = std::max(memory_high_water_, ctx_->arena.high_water());
}

nlohmann::json ThreadLane::report() const {
  if (abandoned_ || thread_done_ || !ctx_) return last_report_;
  call(limits_.call_deadline_s, "report", [](Lane& lane, Results& r) { r.report = lane.report(); });
  last_report_ = host_->results.report;
  return last_report_;
}

void ThreadLane::teardown(LaneContext& ctx) {
  if (abandoned_ || thread_done_) return;
  LaneContext* c = &ctx;
  try {
    call(limits_.call_deadline_s, "teardown", [c](Lane& lane, Results& r) {
      lane.teardown(*c);
      r.report = lane.report();
    });
  } catch (...) {
    if (!abandoned_) {
      stop_thread();
      thread_done_ = true;
    }
    throw;
  }
  last_report_ = host_->results.report;
  stop_thread();
  thread_done_ = true;
}

}  // namespace pipelane
