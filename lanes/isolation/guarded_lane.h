// GuardedLane: a Lane whose every call is bounded in time and kept away from training's state.
// The gap scheduler runs every lane through one: a ThreadLane (isolation = thread: the lane's code
// runs on a thread of the trainer, unisolated but with its floating-point environment and thread
// settings restored after every call) or a ProcessLane (isolation = process: a worker process of
// the rank; a crash, exit, hang or memory runaway kills the worker, never the trainer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lanes/lane.h"

namespace pipelane {

// A call that did not return within its deadline. The lane cannot be used again: its worker was
// killed (process) or its thread abandoned (thread).
class LaneTimeout : public LaneError {
 public:
  using LaneError::LaneError;
};

// The lane's worker process ended during a call (signal or exit). The lane cannot be used again.
class LaneCrash : public LaneError {
 public:
  using LaneError::LaneError;
};

enum class LaneIsolation { Thread, Process };
const char* isolation_name(LaneIsolation isolation);

struct LaneLimits {
  double step_deadline_s = 0;   // wall-clock limit of step(); 0: none
  double call_deadline_s = 0;   // of setup, save, load, report and teardown; 0: none
  std::uint64_t output_bytes = 0;  // disk quota of the lane's output directory; 0: none
  std::uint64_t state_bytes = 0;   // the most save() may return ([lanes] state_mb); 0: none
};

// What the last step() cost the machine, measured where the lane ran: the gap scheduler tells a
// runaway lane from a preempted one with it.
struct LaneStepCost {
  // From the lane's call starting to it returning, where it ran: without the time it took to hand
  // the step over and the result back (on a busy machine, waiting for a CPU). 0: not measured.
  double wall_s = 0;
  double cpu_s = 0;              // CPU time of the thread that ran the step
  long involuntary_switches = 0; // times the OS took the CPU away during the step
  double waiting_s = -1;         // of wall_s, runnable but waiting for a CPU; -1: not measured
};

class GuardedLane : public Lane {
 public:
  // Applies to calls made after it; output_bytes before setup().
  virtual void set_limits(const LaneLimits& limits) = 0;
  virtual LaneStepCost last_step_cost() const = 0;
  // Peak bytes the lane used: its arena's high-water mark (plus, in a worker, what it allocated
  // outside the arena).
  virtual std::size_t memory_high_water() const = 0;
  virtual LaneIsolation isolation() const = 0;
  // A call ran past its deadline on a thread that cannot be stopped: the lane's objects must
  // outlive everything (they are still in use).
  virtual bool abandoned() const { return false; }
};

}  // namespace pipelane
