// isolation = thread: the lane's code runs on a thread of its own inside the trainer. Not
// isolated from training's memory (built-ins and trusted code only), but:
//   - each call waits at most its deadline; past it the gap ends on time and the lane is
//     abandoned (a thread cannot be stopped safely: it runs on until the process exits, and its
//     objects are never freed), so the scheduler quarantines it;
//   - the floating-point environment (rounding, FTZ/DAZ) is restored after every call, and
//     training's thread never runs lane code at all (thread counts need no care: every backend op
//     sets its own);
//   - the lane's output directory is held to its disk quota.
// The thread starts at the first call, from the caller's thread: it inherits that thread's
// floating-point environment (training's, FTZ/DAZ on).
#pragma once
#include <functional>
#include <memory>

#include "lanes/isolation/guarded_lane.h"

namespace pipelane {

class ThreadLane final : public GuardedLane {
 public:
  explicit ThreadLane(std::unique_ptr<Lane> lane);
  ~ThreadLane() override;  // stops and joins the thread, unless abandoned
  ThreadLane(const ThreadLane&) = delete;
  ThreadLane& operator=(const ThreadLane&) = delete;

  std::string name() const override { return name_; }
  std::string work_unit() const override { return work_unit_; }
  // `ctx` must outlive the lane (and, once abandoned(), the process).
  void setup(LaneContext& ctx) override;
  double step(LaneContext& ctx) override;
  bool finished() const override { return finished_; }
  std::string save() const override;
  void load(const std::string& state) override;
  nlohmann::json report() const override;  // the last one once the thread is gone
  void teardown(LaneContext& ctx) override;

  void set_limits(const LaneLimits& limits) override { limits_ = limits; }
  LaneStepCost last_step_cost() const override { return cost_; }
  std::size_t memory_high_water() const override { return memory_high_water_; }
  LaneIsolation isolation() const override { return LaneIsolation::Thread; }
  bool abandoned() const override { return abandoned_; }

 private:
  struct Host;
  struct Results;
  // Runs `task` on the lane's thread; LaneTimeout past `deadline_s` (0: none). Rethrows what the
  // task threw. A task captures by value and writes only into Results: once abandoned it may run
  // on after its caller returned.
  void call(double deadline_s, const char* what, std::function<void(Lane&, Results&)> task) const;
  void stop_thread() const;

  std::string name_, work_unit_;
  std::shared_ptr<Host> host_;
  LaneContext* ctx_ = nullptr;
  LaneLimits limits_;
  bool finished_ = false;
  LaneStepCost cost_;
  std::size_t memory_high_water_ = 0;
  mutable bool abandoned_ = false;
  mutable bool thread_done_ = false;  // torn down or abandoned: no more calls
  mutable nlohmann::json last_report_ = nlohmann::json::object();
};

}  // namespace pipelane
