// The cost model of a job on a cluster: seconds of every compute instruction (from a device's
// FLOP/s, or from a profile measured on a real run), point-to-point transfers of the real
// activation sizes over the links between the stages' devices, tensor-parallel all-reduces inside
// the passes, data-parallel gradient all-reduces overlapping the drain, and the GradSync.
//
// Data-parallel replicas are simulated once. When every replica's ranks sit in the same kind of
// places (the links between its stages and within its groups are the same for all replicas),
// all replicas run the same instructions at the same costs and meet only in the gradient
// all-reduces, which start and end together on all of them: one replica's timeline is every
// replica's, exactly. When placements differ (a node boundary cutting some replicas' pipelines
// and not others'), each stage pair gets the slowest link any replica has, which is the pace of
// the whole job (the world-wide GradSync waits for the slowest replica); replicas_identical()
// then says false.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/rank_grid.h"
#include "parallel/schedule_sim.h"
#include "parallel/sim/cluster.h"
#include "parallel/sim/distribution.h"
#include "parallel/sim/job_shape.h"

namespace pipelane::sim {

// One traced step of a run: each instruction's time by (stage, op, microbatch, chunk) - which is
// unique within a stage's list - and the wake-up times of its waits.
struct TracedStep {
  using Key = std::tuple<int, Op, int, int>;
  std::map<Key, double> seconds;  // GradSync: its own work (the time it did not wait)
  std::vector<double> wake;       // see MeasuredProfile::wake_samples
};

// Seconds per instruction: [stage][chunk] for the compute passes, [stage] for the rest.
struct OpTable {
  std::vector<std::vector<double>> fwd, bwd, bwd_weight;  // Bwd as the schedule runs it (ZB-H1: B)
  std::vector<double> optimizer;
  std::vector<double> sync;  // GradSync's own work on the stage: the gradient norm and its all-reduce
  // The host's own work of a send and of a receive whose data is there (a profile's; empty: none).
  std::vector<double> send, recv;
  // A profile's traced steps, each as it ran (optional): when present, simulated iterations replay
  // them in turn, every instruction taking its time in that step, instead of the means - so a
  // loaded machine's slow steps are as slow and as rare as they were (an iteration is a max over
  // paths of sums: its typical length is not the one of typical instructions).
  std::vector<TracedStep> traced_steps;
};

// A profile measured on a real run (`pipelane train`'s summary.json and trace.json).
struct MeasuredProfile {
  std::string source;
  JobSpec job;                 // the shape it was measured on
  double t_f = 0, t_b = 0, t_w = 0;  // summary.json measured_op_ms: mean Fwd, full backward, W (s)
  std::optional<OpTable> instructions;  // means per stage and chunk, when a trace was read
  // Time from a send to the end of the wait of a receiver that was waiting for it before it was
  // sent: on the profiled machine, what a waiting rank takes to go on (wire time included), as
  // equally likely values (empty: not measured).
  std::vector<double> wake_samples;
};

// From a device: FLOPs / (peak x efficiency), plus the tensor-parallel all-reduces over the tp
// group's link (recomputation's reruns inside B, and W under the split backward); the optimizer
// step reads and writes 28 bytes a parameter it updates (the distributed optimizer: its shard) at
// the memory bandwidth, the gradient norm reads 4.
OpTable device_op_table(const JobSpec& job, const JobShape& shape, const Cluster& cluster,
                        AllReduceAlgorithm algorithm);

// From a profile: the measured means as they are when `job` is the profiled shape (same model,
// micro batch, sequence, tp, split, schedule kind, recomputation and optimizer shards); otherwise
// seconds per FLOP of each pass kind, taken from the profile over its own FLOPs, times the FLOPs
// of `job`'s instructions (and seconds per parameter for the optimizer step), plus `job`'s
// tensor-parallel all-reduces. Recomputation's reruns are forward work: priced at the forward's
// rate, and taken out of a profile measured with recomputation before its backward's rate is.
OpTable profile_op_table(const JobSpec& job, const JobShape& shape, const MeasuredProfile& profile,
                         const Cluster& cluster, AllReduceAlgorithm algorithm);
// True when profile_op_table uses the profile's means as they are.
bool profile_matches(const JobSpec& job, const MeasuredProfile& profile);

class JobCostModel final : public SimCostModel {
 public:
  JobCostModel(const JobSpec& job, const JobShape& shape, const Cluster& cluster, OpTable ops,
               AllReduceAlgorithm algorithm);

  double compute_s(int stage, const Instr& instr) const override;
  double arrival_s(int from_stage, int to_stage, const Instr& send, double send_s) override;
  // A cross-site message above its link's rendezvous_above_bytes: its bytes leave once the
  // receive is posted and the clear-to-send is back (one latency), and the request and the answer
  // add a round trip to a message whose receive was already waiting.
  double delivered_s(int from_stage, int to_stage, const Instr& send, double arrival, double recv_posted_s) override;
  // Cross-site transfers of lists lowered by parallel/wan_schedule (wan.stripes > 0) take the
  // link between the two sites striped over wan.stripes connections (each the link's per-connection
  // bandwidth, together at most its capacity). Concurrent sharing: the wan.sharers pipelines send
  // their copies at once and split the capacity. Temporal: each copy has the link alone, in turns
  // (the sender goes on; its message waits for its turn), so this pipeline's next message on the
  // link goes after the others' (sharers x wire time), and pipeline r's messages arrive r wire
  // times after pipeline 0's - the simulated one, whose turn is first. The gradient all-reduces and
  // the GradSync wait for the last pipeline: the lists' largest (sharers - 1) x turn time later.
  // Call with the simulated lists before simulating.
  void plan_wan(const std::vector<std::vector<Instr>>& lists);
  // Seconds one cross-site message takes on the wire (no latency) under its WAN slot.
  double wan_wire_s(const LinkSpec& link, const WanSlot& slot) const;
  // How long one turn of temporal sharing holds the link: the turn passes when the send has
  // completed, which a rendezvous send does only after the receiver's answer - its round trip is
  // part of the turn.
  double wan_turn_s(const LinkSpec& link, const WanSlot& slot) const;
  bool rendezvous(const LinkSpec& link) const {
    return link.rendezvous_above_bytes > 0 && message_bytes_ > link.rendezvous_above_bytes;
  }
  double grad_reduce_done_s(int stage, int chunk, double ready_s) override;
  double sync_s() const override;

  void start_iteration() override;  // empties the link queues; the next traced step, if any
  double wake_s() const override;
  double iteration_end_s() const override;
  // The wake-up time as equally likely values (empty: none); drawn from per wait.
  void set_wake(std::vector<double> samples) { wake_ = std::move(samples); }
  // Draws of measured spreads (OpTable's samples, the wake) start from this seed.
  void set_seed(std::uint64_t seed) { draws_ = UniformDraws(seed); }
  bool replicas_identical() const { return replicas_identical_; }
  const OpTable& ops() const { return ops_; }
  double message_bytes() const { return message_bytes_; }
  // The link stage `from` sends to stage `to` over (the slowest over replicas).
  const LinkSpec& p2p_link(int from, int to) const;

 private:
  JobSpec job_;
  OpTable ops_;
  AllReduceAlgorithm algorithm_;
  double message_bytes_ = 0;
  double tied_s_ = 0;
  double loss_sum_s_ = 0;  // the world all-reduce of the loss ending every iteration
  std::vector<double> wake_;
  mutable UniformDraws draws_{1};  // drawing is the model's own state, not a change to it
  std::size_t step_ = 0;           // the traced step the current iteration replays
  bool started_ = false;
  const TracedStep* traced() const;
  double traced_or(int stage, const Instr& instr, double mean) const;
  bool replicas_identical_ = true;
  std::map<std::pair<int, int>, LinkSpec> p2p_;  // (from, to) stage -> link
  std::vector<std::vector<double>> dp_reduce_s_;   // [stage][chunk]: all-reduce, or ZeRO's reduce-scatter
  std::vector<double> dp_gather_s_;                // [stage]: ZeRO's all-gathers after OptimizerStep, what of them
                                                   // the stage's wait for its first activation does not hide
  std::map<std::pair<int, int>, double> link_free_;  // (from, to) -> when its last message is sent
  std::vector<double> dp_free_;                    // [stage] -> when its dp link is free
  double wan_lag_s_ = 0;  // the last pipeline's delay behind the simulated one (temporal sharing)
};

// The world rank a job's coordinates take on the cluster's devices (JobSpec::replicas_across_sites
// picks the order), and the distance between neighbours of a data-parallel group there.
int physical_rank(const JobSpec& job, RankCoords coords);
int dp_stride(const JobSpec& job);
// Where the job's grid lands on the cluster's sites (parallel/sites.h). std::invalid_argument when
// the cluster has fewer devices than the job.
SitePlacement job_placement(const JobSpec& job, const Cluster& cluster);

}  // namespace pipelane::sim
