// Times one lane call on the thread that runs it: wall clock, the thread's CPU time, involuntary
// context switches, and the time it spent runnable but waiting for a CPU (the run queue, from
// /proc/thread-self/schedstat, read with one pread on a descriptor kept open). The last is what a
// busy machine added; the gap scheduler does not hold it against the lane.
#pragma once
#include <chrono>

#include "lanes/isolation/guarded_lane.h"

namespace pipelane {

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
