// Times one lane call on the thread that runs it: wall clock, the thread's CPU time, involuntary
// context switches, and the time it spent runnable but waiting for a CPU (the run queue, from
// /proc/thread-self/schedstat, read with one pread on a descriptor kept open). The last is what a
// busy machine added; the gap scheduler does not hold it against the lane.
#pragma once
#include <chrono>

#include "lanes/isolation/guarded_lane.h"

namespace pipelane {

// A worker's step, charged for what the lane's other threads took during its call (others_s of
// CPU time): on the worker's `threads` cores, at least others_s - (threads - 1) x wall of it came
// out of the step's own share (on one core, all of it), as time the step's thread waited for a
// CPU. That wait is the lane's doing, not the machine's: it moves from waiting_s (which the gap
// scheduler forgives) to cpu_s (which it judges), so a lane that slows its own steps with a thread
// it left running is a runaway like any other.
LaneStepCost charge_other_threads(LaneStepCost cost, double others_s, int threads);

class StepTimer {
 public:
  StepTimer() = default;
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  // Both on the thread being measured (the schedstat file is opened at the first start()).
  void start();
  LaneStepCost stop();

 private:
  double run_queue_s();  // -1 without schedstat
  int schedstat_fd_ = -2;  // -2: not opened yet; -1: unavailable
  std::chrono::steady_clock::time_point wall0_{};
  double cpu0_ = 0;
  long switches0_ = 0;
  double waiting0_ = -1;
};

}  // namespace pipelane
