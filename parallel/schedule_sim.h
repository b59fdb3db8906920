// Unit-cost simulator of pipeline schedules: runs every stage's instruction list together with
// fixed compute costs, zero-cost transfers, buffered sends and blocking receives.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/schedule.h"

namespace pipelane {

struct SimCosts {
  double t_f = 1;  // Fwd
  double t_b = 2;  // full backward (GPipe/1F1B/interleaved Bwd); ZB-H1: Bwd = t_b - t_w
  double t_w = 1;  // ZB-H1 BwdWeight
  double t_sync = 0;  // GradSync once every stage has reached it (a barrier over all stages)
  double t_opt = 0;   // OptimizerStep
};

// Throws std::invalid_argument when a cost is negative or, for ZB-H1, t_w > t_b.
void validate_sim_costs(const SimCosts& costs, ScheduleKind kind);

// Compute cost of one instruction of a schedule of `kind` (0 for sends and receives).
double instr_cost(const Instr& instr, ScheduleKind kind, const SimCosts& costs);

struct SimEvent {
  double start;
  double end;     // receives: when the data was there (end - start is the wait)
  int index;      // position in the stage's instruction list (the gap id for waits)
  Instr instr;
};

struct SimIdle {
  double start;
  double end;
  int index;      // the waiting instruction's position in the list
  WaitKind kind;  // that instruction's wait kind
};

struct StageTimeline {
  std::vector<SimEvent> events;  // every instruction, in list order
  std::vector<SimIdle> idle;     // waits of positive length, plus the tail up to the makespan
  double busy = 0;               // total compute time
  double idle_total = 0;
  double idle_by_kind[5] = {0, 0, 0, 0, 0};  // indexed by static_cast<int>(WaitKind)
};

struct SimResult {
  std::vector<StageTimeline> stages;
  double makespan = 0;
  double bubble_fraction = 0;  // sum of idle / (pp * makespan)
  std::vector<int> max_in_flight;  // per stage: most activations held (Fwd done, Bwd/W not yet)
};

// Thrown when the lists cannot complete; what() names each stuck stage and its instruction.
class ScheduleDeadlock : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Simulates the given per-stage lists (lists.size() == spec.pp). Throws ScheduleDeadlock if they
// deadlock, std::invalid_argument if a send has no receive (or a message is received twice).
SimResult simulate_schedule(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists,
                            const SimCosts& costs);
// Builds every stage's list with build_schedule and simulates them.
SimResult simulate_schedule(const ScheduleSpec& spec, const SimCosts& costs);

// Most activations held at once by one stage's list (Fwd done, its Bwd - or for a list with
// BwdWeight, its BwdWeight - not yet), counted per (microbatch, chunk).
int max_in_flight(const std::vector<Instr>& list);

}  // namespace pipelane
