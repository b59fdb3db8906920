// Simulator of pipeline schedules: runs every stage's instruction list together, with buffered
// sends and blocking receives, under a cost model: fixed unit costs and free transfers (SimCosts),
// or any SimCostModel (parallel/sim/ prices a real job). Waits can be handed to a SimGapFiller.
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
  double busy = 0;               // total compute time (GradSync's sync_s counts as busy)
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

// What a simulation charges. The unit-cost model above (SimCosts) is one; parallel/sim/ has the
// model of a real job (measured or FLOP-derived compute, links, collectives).
class SimCostModel {
 public:
  virtual ~SimCostModel() = default;
  // Seconds `stage` spends on an instruction itself: a Fwd, Bwd, BwdWeight or OptimizerStep, or the
  // host's own work of a send or of a receive whose data is there (posting, copying; not waiting).
  virtual double compute_s(int stage, const Instr& instr) const = 0;
  // When a message sent by `from_stage` at `send_s` (a SendFwd/SendBwd) arrives at `to_stage`.
  // Called in each sender's program order, so a model may queue messages on a link.
  virtual double arrival_s(int from_stage, int to_stage, const Instr& send, double send_s);
  // When that message, there at `arrival` by arrival_s, can be used by a receive posted at
  // `recv_posted_s` (a transport that waits for the receive before sending the bulk of a large
  // message makes it later). Default: at its arrival.
  virtual double delivered_s(int from_stage, int to_stage, const Instr& send, double arrival, double recv_posted_s);
  // A chunk's gradients are final at `ready_s` (after its last gradient-writing instruction): when
  // their data-parallel all-reduce, started then in the background, has finished. Called in
  // program order per stage. Default: no data parallelism (ready_s).
  virtual double grad_reduce_done_s(int stage, int chunk, double ready_s);
  // GradSync, once every stage stands at it and its gradient all-reduces are done: the seconds of
  // what follows on every stage (tied-embedding sum, global gradient norm).
  virtual double sync_s() const = 0;
  // A driver simulating iteration after iteration calls this before each (queues start empty).
  virtual void start_iteration() {}
  // What a stage that had to wait takes to go on once the data is there (waking a waiting process
  // on a busy machine): added to every wait of positive length. Default 0.
  virtual double wake_s() const { return 0.0; }
  // The collectives every stage joins after its last instruction (the executor's loss sum): the
  // iteration ends this long after the last stage is done. Default 0.
  virtual double iteration_end_s() const { return 0.0; }
};

// Fills simulated waits, as lanes fill real ones. Called when `stage` reaches the wait at list
// position `index` (its gap id) at `start_s` and the data (or, at GradSync, the last stage) is
// there at `ready_s` > start_s. Returns when the stage goes on: >= ready_s, later when side work
// ran past the arrival (its cost to training).
class SimGapFiller {
 public:
  virtual ~SimGapFiller() = default;
  virtual double fill(int stage, int index, WaitKind kind, double start_s, double ready_s) = 0;
};

// Simulates the given per-stage lists (lists.size() == spec.pp). Throws ScheduleDeadlock if they
// deadlock, std::invalid_argument if a send has no receive (or a message is received twice).
SimResult simulate_schedule(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists,
                            const SimCosts& costs);
// The same under any cost model, with waits handed to `filler` when one is given. GradSync is a
// barrier over all stages: each stage's wait there is [its arrival, the last stage's arrival]
// (filled like any other), then every stage waits for its own gradient all-reduces and for the
// slowest filled wait, then spends sync_s().
SimResult simulate_schedule(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists,
                            SimCostModel& model, SimGapFiller* filler = nullptr);
// Builds every stage's list with build_schedule and simulates them.
SimResult simulate_schedule(const ScheduleSpec& spec, const SimCosts& costs);

// Most activations held at once by one stage's list (Fwd done, its Bwd - or for a list with
// BwdWeight, its BwdWeight - not yet), counted per (microbatch, chunk).
int max_in_flight(const std::vector<Instr>& list);

}  // namespace pipelane
