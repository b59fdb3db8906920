// The job simulator (parallel/sim): cost model, transfers, memory from the size tables, lanes in
// simulated gaps by the gap scheduler's fit rule, replicas, and the planner.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/pipeline_executor.h"
#include "parallel/sim/job_memory.h"
#include "parallel/sim/planner.h"
#include "parallel/sim/simulation.h"
#include "parallel/topology.h"
#include "tests/parallel/sim_test_shapes.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane::sim {
namespace {

// Fixed costs: Fwd t_f, Bwd t_b, everything else free.
class FixedCosts final : public SimCostModel {
 public:
  FixedCosts(double t_f, double t_b) : t_f_(t_f), t_b_(t_b) {}
  double compute_s(int, const Instr& i) const override {
    return i.op == Op::Fwd ? t_f_ : i.op == Op::Bwd ? t_b_ : 0.0;
  }
  double sync_s() const override { return 0.0; }

 private:
  double t_f_, t_b_;
};

std::vector<std::vector<Instr>> lists_of(const ScheduleSpec& spec) {
  std::vector<std::vector<Instr>> lists;
  for (int s = 0; s < spec.pp; ++s) lists.push_back(build_schedule(spec, s));
  return lists;
}

using test_shapes::small_gpt;

Cluster one_node(int devices, const LinkSpec& link) { return test_shapes::one_node(devices, "h100", link); }

LaneModel constant_lane(const std::string& name, double step_s) {
  LaneModel lane;
  lane.name = name;
  lane.step_s = {step_s};
  return lane;
}

// GPipe, pp 2, m 1, t_f 1, t_b 2: stage 1 waits [0, 1] for the activation, stage 0 waits [1, 4]
// for the gradient, stage 1 waits [4, 6] at GradSync for stage 0. Makespan 6.
const ScheduleSpec kTwoStages{ScheduleKind::GPipe, 2, 1, 1};

TEST(SimLanes, FillEachGapByTheFitRuleAfterProfiling) {
  FixedCosts costs(1, 2);
  LaneSimSettings settings;
  settings.margin = 0.9;
  settings.profile_iterations = 1;
  LaneSimulator lanes({constant_lane("a", 0.4)}, {{true}, {true}}, settings);
  const JobSimReport r = simulate_job(kTwoStages, lists_of(kTwoStages), costs, &lanes, 2, 0);
  EXPECT_DOUBLE_EQ(r.iteration_s[0], 6.0);
  EXPECT_DOUBLE_EQ(r.iteration_s[1], 6.0);  // nothing ran past an arrival
  // Iteration 1: budgets 0.9, 2.7 and 1.8 take 2, 6 and 4 steps of 0.4 (the next would not fit).
  const auto& totals = lanes.totals();
  EXPECT_EQ(totals[0][0].steps, 6);
  EXPECT_EQ(totals[1][0].steps, 2 + 4);
  double bubble = 0, harvested = 0;
  for (const StageReport& st : r.stages) {
    bubble += st.bubble_after_profiling_s;
    harvested += st.harvested_after_profiling_s;
    EXPECT_DOUBLE_EQ(st.overrun_s, 0.0);
  }
  EXPECT_NEAR(bubble, 6.0, 1e-12);
  EXPECT_NEAR(harvested, 4.8, 1e-12);
}

TEST(SimLanes, ProfilingIterationsOnlyMeasure) {
  FixedCosts costs(1, 2);
  LaneSimSettings settings;
  settings.profile_iterations = 3;
  LaneSimulator lanes({constant_lane("a", 0.1)}, {{true}, {true}}, settings);
  simulate_job(kTwoStages, lists_of(kTwoStages), costs, &lanes, 3, 0);
  EXPECT_TRUE(lanes.steps().empty());
}

TEST(SimLanes, AStepPastTheArrivalDelaysTrainingAndIsCountedAsOverrun) {
  FixedCosts costs(1, 2);
  LaneSimSettings settings;
  settings.margin = 1.5;  // lets a step start that cannot end before the data is there
  settings.profile_iterations = 1;
  LaneSimulator lanes({constant_lane("a", 0.7)}, {{false}, {true}}, settings);
  const JobSimReport r = simulate_job(kTwoStages, lists_of(kTwoStages), costs, &lanes, 2, 0);
  // Stage 1's first gap (1 s, budget 1.5): steps [0, 0.7] and [0.7, 1.4]; the data came at 1, so
  // stage 1 goes on at 1.4 and the whole iteration is 0.4 s later (the GradSync gap, 2 s with a
  // budget of 3, takes steps until the arrival and may add more).
  EXPECT_GE(r.iteration_s[1], 6.4 - 1e-12);
  EXPECT_GT(r.stages[1].overrun_s, 0.39);
  EXPECT_EQ(lanes.totals()[0][0].steps, 0);  // not on stage 0
}

// The interference model (kernel_block_s): a filled gap's end costs training half a lane kernel
// block; a lane without it costs nothing when its steps fit, and training alone is unchanged.
TEST(SimLanes, KernelBlocksDelayTrainingAtEachFilledGapsEnd) {
  FixedCosts costs(1, 2);
  LaneSimSettings settings;
  settings.profile_iterations = 1;
  LaneModel blocky = constant_lane("a", 0.4);
  blocky.kernel_block_s = 0.1;
  LaneSimulator plain({constant_lane("a", 0.4)}, {{true}, {true}}, settings);
  LaneSimulator with_blocks({blocky}, {{true}, {true}}, settings);
  const JobSimReport without = simulate_job(kTwoStages, lists_of(kTwoStages), costs, &plain, 2, 0);
  const JobSimReport with = simulate_job(kTwoStages, lists_of(kTwoStages), costs, &with_blocks, 2, 0);
  EXPECT_DOUBLE_EQ(without.iteration_s[1], 6.0);  // fitted steps: no cost
  EXPECT_GT(with.iteration_s[1], 6.0);           // the same steps, each gap's end 0.05 s later
  EXPECT_DOUBLE_EQ(with.iteration_s[0], 6.0);    // profiling: no steps, no delay
  double delay = 0;
  for (const auto& stage : with_blocks.totals()) delay += stage[0].interference_s;
  EXPECT_NEAR(delay, 0.05 * 3, 1e-9);  // three filled gaps (stage 0: one, stage 1: two)
  EXPECT_DOUBLE_EQ(plain.totals()[0][0].interference_s + plain.totals()[1][0].interference_s, 0.0);
}

// The CPU interference model (lane_gap_delay_s, what a run's control gaps measure): every gap left
// to the lanes after profiling, filled or not - the measurement's own definition - delays the
// compute after it; profiling gaps and stages without lanes do not.
TEST(SimLanes, LaneGapDelayFollowsEveryGapLeftToTheLanesAfterProfiling) {
  FixedCosts costs(1, 2);
  LaneSimSettings settings;
  settings.profile_iterations = 1;
  settings.lane_gap_delay_s = 0.05;
  // Steps of 10 s never fit: the gaps stay empty and are still lane gaps.
  LaneSimulator lanes({constant_lane("a", 10.0)}, {{true}, {true}}, settings);
  const JobSimReport r = simulate_job(kTwoStages, lists_of(kTwoStages), costs, &lanes, 2, 0);
  EXPECT_DOUBLE_EQ(r.iteration_s[0], 6.0);  // profiling: no delay
  EXPECT_GT(r.iteration_s[1], 6.0 + 0.05 - 1e-12);
  EXPECT_EQ(lanes.lane_gaps()[0], 1);  // stage 0 waits once (for the gradient)
  EXPECT_EQ(lanes.lane_gaps()[1], 2);  // stage 1 twice (the activation, the gradient sync)
  EXPECT_NEAR(lanes.lane_gap_delay_s()[0] + lanes.lane_gap_delay_s()[1], 3 * 0.05, 1e-12);
  EXPECT_TRUE(lanes.steps().empty());

  LaneSimulator stage1_only({constant_lane("a", 10.0)}, {{false}, {true}}, settings);
  simulate_job(kTwoStages, lists_of(kTwoStages), costs, &stage1_only, 2, 0);
  EXPECT_EQ(stage1_only.lane_gaps()[0], 0);
  EXPECT_DOUBLE_EQ(stage1_only.lane_gap_delay_s()[0], 0.0);

  settings.lane_gap_delay_s = -1;
  EXPECT_THROW(LaneSimulator({constant_lane("a", 1.0)}, {{true}, {true}}, settings), std::invalid_argument);
}

// The gap scheduler's quarantine rule (lanes/gap_scheduler.h): 3 late steps (over 10x the
// prediction) among the lane's last 16, not 2 in a row. The lane runs on stage 1 only, which replays
// the second half of its step sequence: 3 calibration steps of 0.1 s, then the spikes given.
LaneModel lane_with_spikes(const std::vector<int>& spikes_after_calibration) {
  LaneModel lane = constant_lane("spiky", 0.1);
  const std::size_t half = 200;
  lane.step_sequence.assign(2 * half, 0.1);
  for (int k : spikes_after_calibration) lane.step_sequence[half + 3 + k] = 2.0;
  return lane;
}

bool quarantined_after(const std::vector<int>& spikes) {
  FixedCosts costs(1, 2);
  LaneSimSettings settings;
  settings.profile_iterations = 1;
  LaneSimulator lanes({lane_with_spikes(spikes)}, {{false}, {true}}, settings);
  simulate_job(kTwoStages, lists_of(kTwoStages), costs, &lanes, 8, 0);
  return lanes.totals()[1][0].quarantined;
}

TEST(SimLanes, QuarantineTakesThreeLateStepsAmongTheLastSixteen) {
  EXPECT_FALSE(quarantined_after({5, 6}));          // two in a row: the machine, maybe
  EXPECT_TRUE(quarantined_after({5, 10, 15}));      // three within 16 steps: the lane
  EXPECT_FALSE(quarantined_after({5, 25, 45, 65}));  // never three within 16
}

TEST(SimCosts, TransfersPayLatencyAndBandwidthOnTheLinkBetweenStages) {
  JobSpec job;
  job.model = small_gpt();
  job.seq_len = 64;
  job.micro_batch = 2;
  job.schedule = kTwoStages;
  const JobShape shape = job_shape(job);
  const LinkSpec link{"slow", "", 0.5, 1e6, 1, 0};  // 0.5 s, 1 MB/s
  const Cluster cluster = one_node(2, link);
  OpTable ops;
  ops.fwd = {{1.0}, {1.0}};
  ops.bwd = {{2.0}, {2.0}};
  ops.bwd_weight = {{0.0}, {0.0}};
  ops.optimizer = {0.0, 0.0};
  ops.sync = {0.0, 0.0};
  JobCostModel model(job, shape, cluster, ops, AllReduceAlgorithm::Ring);
  const double message = 2.0 * 64 * 128 * 2;  // B x T x d bf16 elements
  EXPECT_DOUBLE_EQ(model.message_bytes(), message);
  const SimResult r = simulate_schedule(kTwoStages, lists_of(kTwoStages), model);
  const double transfer = 0.5 + message / 1e6;
  // The iteration ends with the loss summed over the world (a tree all-reduce of one number).
  EXPECT_NEAR(model.iteration_end_s(), all_reduce_s(8, 2, link, AllReduceAlgorithm::Tree), 1e-12);
  EXPECT_NEAR(r.makespan, 2 * (1.0 + 2.0) + 2 * transfer + model.sync_s() + model.iteration_end_s(), 1e-9);
  // GradSync: the tied embedding (Vp x d fp32) summed between the two stages (latency-bound
  // here), then the stages' own work (none in this table).
  const double tied = 256.0 * 128 * 4;
  EXPECT_NEAR(model.sync_s(), all_reduce_s(tied, 2, link, AllReduceAlgorithm::Ring), 1e-12);
}

TEST(SimCosts, AllReduceFormulas) {
  const LinkSpec link{"l", "", 1e-5, 1e10, 1, 0};
  EXPECT_DOUBLE_EQ(all_reduce_s(1e9, 1, link, AllReduceAlgorithm::Ring), 0.0);
  EXPECT_NEAR(all_reduce_s(1e9, 4, link, AllReduceAlgorithm::Ring), 6 * (1e-5 + 1e9 / 4 / 1e10), 1e-12);
  EXPECT_NEAR(all_reduce_s(1e9, 4, link, AllReduceAlgorithm::Tree), 4 * 1e-5 + 2 * 1e9 / 1e10, 1e-12);
  EXPECT_DOUBLE_EQ(all_reduce_s(1e9, 4, link, AllReduceAlgorithm::Auto),
                   std::min(all_reduce_s(1e9, 4, link, AllReduceAlgorithm::Ring),
                            all_reduce_s(1e9, 4, link, AllReduceAlgorithm::Tree)));
  // Striping over connections multiplies the bandwidth up to the link's capacity.
  const LinkSpec wan{"wan", "", 0.02, 1.25e8, 8, 1.25e9};
  EXPECT_DOUBLE_EQ(wan.effective_bandwidth(), 1e9);
  const LinkSpec capped{"wan", "", 0.02, 1.25e8, 16, 1.25e9};
  EXPECT_DOUBLE_EQ(capped.effective_bandwidth(), 1.25e9);
}

TEST(SimCosts, DeviceComputeIsFlopsOverAchievedPeakAndTheJobCountsTheModelsFlops) {
  JobSpec job;
  job.model = small_gpt();
  job.seq_len = 64;
  job.micro_batch = 2;
  job.schedule = {ScheduleKind::OneFOneB, 2, 1, 4};
  const JobShape shape = job_shape(job);
  const Cluster cluster = one_node(2, *builtin_link("nvlink4"));
  const OpTable t = device_op_table(job, shape, cluster, AllReduceAlgorithm::Auto);
  const double N = 2.0 * 64, d = 128, T = 64, achieved = cluster.device.achieved_flops();
  EXPECT_NEAR(t.fwd[0][0], 4 * N * (24 * d * d + 4 * T * d) / achieved, 1e-15);
  EXPECT_NEAR(t.bwd[0][0], 4 * N * (48 * d * d + 8 * T * d) / achieved, 1e-15);
  EXPECT_GT(t.fwd[1][0], t.fwd[0][0]);  // the head (forward and its fused backward) is on stage 1
  // The whole job's FLOPs agree with GptConfig::train_flops_per_token up to the biases and norms
  // it also counts (about 78 d FLOPs a layer per token against 72 d^2 of matmuls).
  const double expected = job.model.train_flops_per_token(job.seq_len) * job.tokens_per_iteration();
  EXPECT_NEAR(job_flops_per_iteration(job, shape) / expected, 1.0, 2.0 / d);
}

TEST(SimMemory, StageMemoryIsTheExecutorsArena) {
  Topology topo = Topology::single_process();
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1})
    for (RecomputeKind recompute : {RecomputeKind::None, RecomputeKind::Selective, RecomputeKind::Full}) {
      JobSpec job;
      job.model = small_gpt();
      job.seq_len = 32;
      job.micro_batch = 2;
      job.schedule = {kind, 1, 1, 3};
      job.recompute.kind = recompute;
      ExecutorOptions e;
      e.model = job.model;
      e.schedule = job.schedule;
      e.micro_batch = job.micro_batch;
      e.seq_len = job.seq_len;
      e.recompute = job.recompute;
      const PipelineExecutor executor(e, topo, testing::cpu_backend());
      // The simulator's memory is the memory model's, which sizes the arena.
      EXPECT_DOUBLE_EQ(job_memory_bytes(job, Precision::Fp32)[0], static_cast<double>(executor.arena_bytes()))
          << schedule_kind_name(kind) << ", recompute " << recompute_kind_name(recompute);
      // On a bf16 device: what the executor allocates under bf16 storage, which runs in bf16
      // compute (its norms' outputs then go straight to bf16 too).
      e.storage = DType::BF16;
      const std::unique_ptr<Backend> bf16_compute = make_cpu_backend(1, DType::BF16);
      const PipelineExecutor bf16(e, topo, *bf16_compute);
      EXPECT_DOUBLE_EQ(job_memory_bytes(job, Precision::Bf16)[0], static_cast<double>(bf16.arena_bytes()))
          << schedule_kind_name(kind) << ", recompute " << recompute_kind_name(recompute) << ", bf16 storage";
    }
}

// Sequence parallelism: the simulator's stage memory is the memory model's (the executor's arena,
// tests/parallel/test_executor_sequence_parallel.cpp), its p2p message a tp rank's rows, its tp
// collectives the whole activation (a reduce-scatter + all-gather moves what the all-reduce did),
// and the backward's extra all-gathers are counted.
TEST(SimMemory, SequenceParallelIsTheMemoryModelsAndMessagesAreOneTpRanksRows) {
  for (bool sp : {false, true}) {
    JobSpec job;
    job.model = small_gpt();
    job.seq_len = 32;
    job.micro_batch = 2;
    job.tp = 2;
    job.sequence_parallel = sp;
    job.schedule = {ScheduleKind::OneFOneB, 2, 1, 3};
    MemorySpec spec;
    spec.model = job.model;
    spec.schedule = job.schedule;
    spec.tp = 2;
    spec.micro_batch = job.micro_batch;
    spec.seq_len = job.seq_len;
    spec.sequence_parallel = sp;
    const JobShape shape = job_shape(job);
    for (int stage = 0; stage < 2; ++stage)
      EXPECT_DOUBLE_EQ(job_memory_bytes(job, Precision::Fp32)[stage],
                       predict_rank_memory(spec, stage, 0, testing::cpu_backend()).total())
          << "sp " << sp << " stage " << stage;
    const double activation = 2.0 * 32 * job.model.d_model;
    EXPECT_EQ(shape.tp_collective_elements, activation);
    EXPECT_EQ(shape.message_elements, sp ? activation / 2 : activation);
    // Per layer (4 a stage): the backward's extra all-gathers (residual gradient, norm output).
    EXPECT_EQ(shape.virtual_stages[0].tp_all_reduces_fwd, 2 * 4);
    EXPECT_EQ(shape.virtual_stages[0].tp_all_reduces_bwd, (sp ? 3 : 2) * 4);
    EXPECT_EQ(shape.virtual_stages[0].tp_all_reduces_bwd_weight, 0);
  }
  JobSpec zb;
  zb.model = small_gpt();
  zb.seq_len = 32;
  zb.tp = 2;
  zb.sequence_parallel = true;
  zb.schedule = {ScheduleKind::ZeroBubbleH1, 2, 1, 3};
  const JobShape split = job_shape(zb);  // B gathers the residual gradients, W the same again
  EXPECT_EQ(split.virtual_stages[0].tp_all_reduces_bwd, 2 * 4);
  EXPECT_EQ(split.virtual_stages[0].tp_all_reduces_bwd_weight, 2 * 4);
  JobSpec odd;
  odd.model = small_gpt();
  odd.seq_len = 31;
  odd.micro_batch = 1;
  odd.tp = 2;
  odd.sequence_parallel = true;
  EXPECT_THROW(job_shape(odd), std::invalid_argument);  // 31 rows do not split over 2 ranks
}

TEST(SimMemory, AJobOverTheDevicesMemoryDoesNotFit) {
  SimulationSetup setup;
  setup.job.model = small_gpt();
  setup.job.model.layers = 4;
  setup.job.model.d_model = 4096;
  setup.job.model.heads = 32;
  setup.job.model.max_seq_len = 1024;
  setup.job.seq_len = 1024;
  setup.job.micro_batch = 64;
  setup.job.schedule = {ScheduleKind::GPipe, 1, 1, 8};
  setup.cluster = one_node(1, *builtin_link("nvlink4"));
  setup.cluster.device = *builtin_device("rtx3080");
  EXPECT_THROW(run_simulation(setup), DoesNotFit);
}

TEST(SimReplicas, IdenticalWhenEveryReplicaSitsAlikeElseTheSlowestLinkCounts) {
  JobSpec job;
  job.model = small_gpt();
  job.seq_len = 64;
  job.micro_batch = 1;
  job.dp = 4;
  job.schedule = {ScheduleKind::OneFOneB, 2, 1, 4};
  const JobShape shape = job_shape(job);
  OpTable ops;
  ops.fwd = ops.bwd = ops.bwd_weight = {{1.0}, {1.0}};
  ops.optimizer = ops.sync = {0.0, 0.0};
  Cluster eight = one_node(8, *builtin_link("nvlink4"));
  EXPECT_TRUE(JobCostModel(job, shape, eight, ops, AllReduceAlgorithm::Auto).replicas_identical());
  // Six devices a node: replicas 0 and 1 keep both stages in node 0, replicas 2 and 3 cross nodes.
  Cluster six = eight;
  six.devices_per_node = 6;
  six.sites = {{"site", 2}};
  six.inter_node = *builtin_link("ib-ndr");
  const JobCostModel model(job, shape, six, ops, AllReduceAlgorithm::Auto);
  EXPECT_FALSE(model.replicas_identical());
  EXPECT_EQ(model.p2p_link(0, 1).name, "ib-ndr");
}

TEST(SimWan, RendezvousAddsARoundTripAndWaitsForTheReceive) {
  // pp 2 over two sites of one device: every activation and gradient crosses a 10 ms WAN. A link
  // that sends messages above rendezvous_above_bytes by rendezvous charges each one the round trip
  // of its request and answer, and cannot start one before its receive is posted; below the
  // threshold nothing changes.
  SimulationSetup setup;
  setup.job.model = small_gpt();
  setup.job.seq_len = 32;
  setup.job.micro_batch = 2;
  setup.job.schedule = {ScheduleKind::OneFOneB, 2, 1, 4};
  setup.cluster = one_node(1, *builtin_link("nvlink4"));
  setup.cluster.sites = {{"east", 1}, {"west", 1}};
  LinkSpec wan = *builtin_link("wan");
  wan.latency_s = 0.010;
  setup.cluster.inter_site = wan;
  setup.wan = WanSettings{WanSharing::Concurrent, 1};
  setup.iterations = 4;
  const double eager = run_simulation(setup).off.step_s_median;
  const double message = job_shape(setup.job).message_elements * setup.cluster.device.element_bytes();
  setup.cluster.inter_site->rendezvous_above_bytes = message;  // the message is not above it
  EXPECT_DOUBLE_EQ(run_simulation(setup).off.step_s_median, eager);
  setup.cluster.inter_site->rendezvous_above_bytes = message / 2;
  const double rendezvous = run_simulation(setup).off.step_s_median;
  // At least the warm-up's first activation and the cool-down's last gradient lie on the critical
  // path: two messages, a round trip each.
  EXPECT_GE(rendezvous, eager + 2 * 2 * wan.latency_s - 1e-9);
}

TEST(SimScale, TenThousandGpusSimulateOneReplica) {
  SimulationSetup setup;
  setup.job.model.layers = 128;  // ~100B parameters: fits an 80 GiB H100 at pp 16 x tp 8
  setup.job.model.d_model = 8192;
  setup.job.model.heads = 64;
  setup.job.model.max_seq_len = 2048;
  setup.job.model.vocab_size = 50257;
  setup.job.seq_len = 2048;
  setup.job.micro_batch = 1;
  setup.job.tp = 8;
  setup.job.dp = 78;
  setup.job.schedule = {ScheduleKind::Interleaved, 16, 2, 32};
  setup.cluster.name = "h100";
  setup.cluster.device = *builtin_device("h100");
  setup.cluster.devices_per_node = 8;
  setup.cluster.sites = {{"site", 1248}};
  setup.cluster.intra_node = *builtin_link("nvlink4");
  setup.cluster.inter_node = *builtin_link("ib-ndr");
  setup.iterations = 3;
  const SimulationOutcome out = run_simulation(setup);
  EXPECT_TRUE(out.replicas_identical);
  EXPECT_EQ(setup.job.world(), 9984);
  // Interleaving with v = 2 at m = 32 leaves (p-1)/(v m + p-1) = 15/79 of the compute window idle
  // with free transfers; links and the embedding's head only add to it.
  EXPECT_GT(out.off.bubble_fraction, 15.0 / 79 - 0.01);
  EXPECT_LT(out.off.bubble_fraction, 0.5);
}

TEST(Planner, FindsFittingPlansAndMarksAFrontier) {
  PlanSpace space;
  space.model = small_gpt();
  space.seq_len = 64;
  space.global_batch = 16;
  SimulationSetup base;
  base.cluster = one_node(4, *builtin_link("pcie4"));
  base.cluster.device = *builtin_device("rtx6000ada");
  base.lanes = {constant_lane("side", 1e-5)};
  base.iterations = 4;
  const PlanResult result = plan_jobs(space, base);
  ASSERT_FALSE(result.candidates.empty());
  int frontier = 0;
  for (std::size_t i = 0; i < result.candidates.size(); ++i) {
    const PlanCandidate& c = result.candidates[i];
    EXPECT_EQ(c.job.world(), 4);
    frontier += c.on_frontier;
    if (i > 0) {
      EXPECT_GE(result.candidates[i - 1].tokens_per_s, c.tokens_per_s);  // fastest first
    }
  }
  EXPECT_GE(frontier, 1);
  EXPECT_TRUE(result.candidates.front().on_frontier);  // nothing is faster than the fastest
}

TEST(Planner, BalancedSplitGivesTheHeadsStageFewerLayers) {
  GptConfig c = small_gpt();
  c.layers = 24;
  c.d_model = 2048;
  c.heads = 16;
  c.max_seq_len = 1024;
  c.vocab_size = 50257;
  // The head's fused forward + backward (6 d V per token) weighs about two layers (3 (24 d^2 + 4 T d)):
  // the last stage gives up two of its six layers and the others share them.
  EXPECT_EQ(balanced_layer_split(c, 1024, 4), "6,7,7,4");
}

}  // namespace
}  // namespace pipelane::sim
