// The memory features in the job simulator and the planner: what recomputation reruns priced in
// the backward (and the bubbles it lengthens), the distributed optimizer's memory and collectives,
// and the planner choosing recomputation only when nothing fits without it.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/sim/job_memory.h"
#include "parallel/sim/planner.h"
#include "parallel/sim/simulation.h"
#include "tests/parallel/sim_test_shapes.h"

namespace pipelane::sim {
namespace {

using test_shapes::small_gpt;

Cluster one_node(int devices, const std::string& device) {
  return test_shapes::one_node(devices, device, *builtin_link("nvlink4"));
}

JobSpec two_stage_job(ScheduleKind kind, RecomputeKind recompute) {
  JobSpec job;
  job.model = small_gpt();
  job.seq_len = 64;
  job.micro_batch = 2;
  job.schedule = {kind, 2, 1, 4};
  job.recompute.kind = recompute;
  return job;
}

OpTable table_of(const JobSpec& job, const Cluster& cluster) {
  return device_op_table(job, job_shape(job), cluster, AllReduceAlgorithm::Auto);
}

// Relative closeness for sums of seconds computed in another order.
void expect_close(double actual, double expected) { EXPECT_NEAR(actual, expected, 1e-12 * std::abs(expected)); }

TEST(SimRecompute, SelectiveRerunsTheAttentionCoreBeforeTheInputGradient) {
  const Cluster cluster = one_node(2, "h100");
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    const OpTable none = table_of(two_stage_job(kind, RecomputeKind::None), cluster);
    const OpTable selective = table_of(two_stage_job(kind, RecomputeKind::Selective), cluster);
    // Four layers a stage, each the attention core's 4 T d FLOPs a token again: B x T = 128 tokens.
    const double rerun = 4 * 128.0 * (4 * 64.0 * 128) / cluster.device.achieved_flops();
    for (int s = 0; s < 2; ++s) {
      EXPECT_DOUBLE_EQ(selective.fwd[s][0], none.fwd[s][0]);
      expect_close(selective.bwd[s][0] - none.bwd[s][0], rerun);
      EXPECT_DOUBLE_EQ(selective.bwd_weight[s][0], none.bwd_weight[s][0]);  // W needs no attention core
    }
  }
}

TEST(SimRecompute, FullRerunsTheStagesForwardBeforeBAndUnderTheSplitBackwardBeforeWAgain) {
  // Stage 0 has no head, so what full recomputation reruns is exactly its Fwd: the layers'
  // FLOPs and, under tp, their two all-reduces each.
  for (int tp : {1, 2}) {
    const Cluster cluster = one_node(4, "h100");
    JobSpec none = two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::None);
    none.tp = tp;
    JobSpec full = none;
    full.recompute.kind = RecomputeKind::Full;
    const OpTable a = table_of(none, cluster), b = table_of(full, cluster);
    expect_close(b.bwd[0][0] - a.bwd[0][0], a.fwd[0][0]);
    none.schedule.kind = full.schedule.kind = ScheduleKind::ZeroBubbleH1;
    const OpTable split_a = table_of(none, cluster), split_b = table_of(full, cluster);
    expect_close(split_b.bwd[0][0] - split_a.bwd[0][0], split_a.fwd[0][0]);
    expect_close(split_b.bwd_weight[0][0] - split_a.bwd_weight[0][0], split_a.fwd[0][0]);
  }
  // Block: only the first `layers` layers of each stage, so one of four layers' forward again.
  const Cluster cluster = one_node(2, "h100");
  JobSpec block = two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::Full);
  block.recompute.method = RecomputeMethod::Block;
  const OpTable none = table_of(two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::None), cluster);
  expect_close(table_of(block, cluster).bwd[0][0] - none.bwd[0][0], none.fwd[0][0] / 4);
}

TEST(SimRecompute, AProfilesRatesPriceTheRerunsAndAreTakenFromItsBackwardWithoutThem) {
  const Cluster cluster = one_node(2, "h100");
  MeasuredProfile profile;  // means only (no trace): the jobs are scaled by FLOPs
  profile.source = "test";
  profile.job = two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::None);
  profile.t_f = 1e-3;
  profile.t_b = 2.5e-3;
  JobSpec none = profile.job, full = profile.job;
  full.recompute.kind = RecomputeKind::Full;
  const OpTable a = profile_op_table(none, job_shape(none), profile, cluster, AllReduceAlgorithm::Auto);
  const OpTable b = profile_op_table(full, job_shape(full), profile, cluster, AllReduceAlgorithm::Auto);
  expect_close(b.bwd[0][0] - a.bwd[0][0], a.fwd[0][0]);  // stage 0's forward again, at the profile's rate
  // The same machine measured with full recomputation: its backward holds the rerun (the mean
  // chunk's, both stages rerunning four layers), which comes out before the backward's rate.
  const JobShape full_shape = job_shape(full);
  const double mean_fwd_flops = (full_shape.virtual_stages[0].fwd_flops + full_shape.virtual_stages[1].fwd_flops) / 2;
  MeasuredProfile measured_full = profile;
  measured_full.job = full;
  measured_full.t_b = profile.t_b + full_shape.virtual_stages[0].rerun_b_flops * profile.t_f / mean_fwd_flops;
  const OpTable c = profile_op_table(none, job_shape(none), measured_full, cluster, AllReduceAlgorithm::Auto);
  for (int s = 0; s < 2; ++s) expect_close(c.bwd[s][0], a.bwd[s][0]);
}

TEST(SimRecompute, LongerBackwardsLengthenTheBubblesTheLanesFill) {
  // 1F1B's bubble on each stage is (p - 1)(t_f + t_b): full recomputation adds the forward to t_b,
  // so the idle time grows and a lane of tiny steps does more work in it.
  SimulationSetup setup;
  setup.job = two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::None);
  setup.cluster = one_node(2, "rtx3080");
  LaneModel lane;
  lane.name = "side";
  lane.step_s = {1e-7};
  setup.lanes = {lane};
  setup.iterations = 6;
  const SimulationOutcome none = run_simulation(setup);
  setup.job.recompute.kind = RecomputeKind::Full;
  const SimulationOutcome full = run_simulation(setup);
  EXPECT_GT(full.off.step_s_median, none.off.step_s_median);
  double idle_none = 0, idle_full = 0;
  for (int s = 0; s < 2; ++s) {
    idle_none += none.off.stages[s].idle_s;
    idle_full += full.off.stages[s].idle_s;
  }
  EXPECT_GT(idle_full, idle_none);
  EXPECT_GT(full.values[0].units, none.values[0].units);
}

double aligned_floats(double floats) { return std::ceil(floats / 16) * 16; }  // the arena's 64 bytes

TEST(SimZero, DistributedOptimizerLowersEachStagesMemoryByItsShardedState) {
  // dp 4 on an H100 (bf16: what pipelane stores under precision = storage = bf16): the fp32
  // weights are the masters and stay whole with the gradients (4 + 4 bytes a parameter); AdamW's m
  // and v (4 + 4 bytes) are kept for the shard only. So on an fp32 device.
  SimulationSetup setup;
  setup.job = two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::None);
  setup.job.micro_batch = 1;
  setup.job.dp = 4;
  setup.cluster = one_node(8, "h100");
  setup.iterations = 3;
  const SimulationOutcome replicated = run_simulation(setup);
  setup.job.distributed_optimizer = true;
  const SimulationOutcome zero = run_simulation(setup);
  const JobShape shape = job_shape(setup.job);
  for (int s = 0; s < 2; ++s) {
    const ChunkShape& c = shape.chunk(setup.job.schedule, s, 0);
    // The shard is 1/dp of the parameters plus the tails every rank keeps: fewer than dp x 16
    // floats per segment (at most two: a tied embedding is one of its own).
    EXPECT_GE(c.optimizer_params, c.params / 4);
    EXPECT_LT(c.optimizer_params, c.params / 4 + 2 * 4 * 16);
    const double saved = replicated.stage_memory_bytes[s] - zero.stage_memory_bytes[s];
    EXPECT_DOUBLE_EQ(saved, 8 * (aligned_floats(c.params) - aligned_floats(c.optimizer_params)));
    EXPECT_NEAR(saved, 8 * c.params * 3 / 4, 8 * (2 * 4 * 16 + 16));
    JobSpec replicated_job = setup.job;
    replicated_job.distributed_optimizer = false;
    EXPECT_DOUBLE_EQ(job_memory_bytes(replicated_job, Precision::Fp32)[s] -
                         job_memory_bytes(setup.job, Precision::Fp32)[s],
                     8 * (aligned_floats(c.params) - aligned_floats(c.optimizer_params)));
  }
  // At dp 1 nothing is sharded: the same memory as the replicated optimizer.
  setup.job.dp = 1;
  JobSpec one = setup.job;
  one.distributed_optimizer = false;
  EXPECT_EQ(job_memory_bytes(setup.job, Precision::Bf16), job_memory_bytes(one, Precision::Bf16));
}

TEST(SimZero, ReduceScatterBeforeAndAllGatherAfterAnOptimizerStepOverTheShard) {
  JobSpec job = two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::None);
  job.dp = 4;
  const Cluster cluster = one_node(8, "h100");
  const LinkSpec& link = cluster.intra_node;
  JobSpec zero = job;
  zero.distributed_optimizer = true;
  const JobShape shape = job_shape(zero);
  const JobCostModel replicated(job, job_shape(job), cluster, table_of(job, cluster), AllReduceAlgorithm::Ring);
  JobCostModel sharded(zero, shape, cluster, table_of(zero, cluster), AllReduceAlgorithm::Ring);
  const Instr step{Op::OptimizerStep, -1, 0};
  double hidden = 0;  // what a stage's wait for its first activation hides of its gather
  for (int s = 0; s < 2; ++s) {
    const ChunkShape& c = shape.chunk(zero.schedule, s, 0);
    const double bytes = c.params * 4;  // fp32 gradients and parameters
    // AdamW reads and writes 28 bytes a parameter of its shard; then the parameters are gathered:
    // on stage 0 before its first forward, on stage 1 overlapping its wait for stage 0's gather
    // and first forward.
    const double gather = all_gather_s(bytes, 4, link);
    expect_close(sharded.compute_s(s, step),
                 c.optimizer_params * 28 / cluster.device.memory_bandwidth + std::max(0.0, gather - hidden));
    hidden += gather + sharded.compute_s(s, Instr{Op::Fwd, 0, 0});
    expect_close(replicated.compute_s(s, step), c.params * 28 / cluster.device.memory_bandwidth);
    expect_close(sharded.grad_reduce_done_s(s, 0, 1.0), 1.0 + reduce_scatter_s(bytes, 4, link));
    // A ring all-reduce is a reduce-scatter and an all-gather: ZeRO moves the same bytes.
    expect_close(reduce_scatter_s(bytes, 4, link) + all_gather_s(bytes, 4, link),
                 all_reduce_s(bytes, 4, link, AllReduceAlgorithm::Ring));
  }
}

// [train] gemm_weights = bf16 under the distributed optimizer shards the fp32 masters too (the
// executor's layout): the simulator's memory is the memory model's for that spec, lower than with
// fp32 GEMM weights, and the parameter all-gather after the step moves the bf16 copy (2 bytes a
// parameter) but for the tensors read outside GEMMs, which go in fp32.
TEST(SimZero, ShardedMastersAreTheMemoryModelsAndGatherInBf16) {
  JobSpec job = two_stage_job(ScheduleKind::OneFOneB, RecomputeKind::None);
  job.dp = 4;
  job.distributed_optimizer = true;
  JobSpec sharded = job;
  sharded.gemm_weights = DType::BF16;
  ASSERT_TRUE(sharded.masters_sharded());
  ASSERT_FALSE(job.masters_sharded());
  const Cluster cluster = one_node(8, "h100");
  const LinkSpec& link = cluster.intra_node;

  MemorySpec spec;  // the same job, written out for the memory model
  spec.model = job.model;
  spec.schedule = job.schedule;
  spec.micro_batch = job.micro_batch;
  spec.seq_len = job.seq_len;
  spec.storage = DType::BF16;
  spec.gemm_weights = DType::BF16;
  spec.optimizer_shards = 4;
  const std::unique_ptr<Backend> sizing = make_sizing_backend(spec);
  ASSERT_EQ(sizing->compute_precision(), DType::BF16) << "bf16 storage runs in bf16 compute";
  const std::vector<RankMemory> want = predict_memory(spec, *sizing);
  const std::vector<double> got = job_memory_bytes(sharded, Precision::Bf16);
  const std::vector<double> fp32 = job_memory_bytes(job, Precision::Bf16);
  ASSERT_EQ(got.size(), 2u);
  const JobShape shape = job_shape(sharded), fp32_shape = job_shape(job);
  const JobCostModel costs(sharded, shape, cluster, table_of(sharded, cluster), AllReduceAlgorithm::Ring);
  const Instr step{Op::OptimizerStep, -1, 0};
  double hidden = 0;
  for (int s = 0; s < 2; ++s) {
    EXPECT_DOUBLE_EQ(got[s], want[s].total());
    EXPECT_GT(want[s].master_weights, 0.0);
    EXPECT_LT(got[s], fp32[s]) << "the masters' shard and the bf16 copy against whole fp32 weights";
    const ChunkShape& c = shape.chunk(sharded.schedule, s, 0);
    EXPECT_GT(c.fp32_read_params, 0.0);  // the norms and biases (and stage 0's embedding lookup)
    EXPECT_LT(c.fp32_read_params, c.params / 2);
    EXPECT_EQ(fp32_shape.chunk(job.schedule, s, 0).fp32_read_params, 0.0);
    const double gather = all_gather_s(2 * (c.params - c.fp32_read_params) + 4 * c.fp32_read_params, 4, link);
    EXPECT_LT(gather, all_gather_s(4 * c.params, 4, link));
    expect_close(costs.compute_s(s, step),
                 c.optimizer_params * 28 / cluster.device.memory_bandwidth + std::max(0.0, gather - hidden));
    hidden += gather + costs.compute_s(s, Instr{Op::Fwd, 0, 0});
  }
}

PlanSpace one_device_space() {
  // One device: pp, tp and dp 1, GPipe over four microbatches of one sequence; only the memory
  // features differ between the candidates (the distributed optimizer needs dp > 1: not tried).
  PlanSpace space;
  space.model = small_gpt();
  space.seq_len = 64;
  space.global_batch = 4;
  space.micro_batches = {1};
  space.schedules = {ScheduleKind::GPipe};
  space.balanced_split = false;
  return space;
}

JobSpec one_device_job(RecomputeKind recompute) {
  JobSpec job;
  job.model = small_gpt();
  job.seq_len = 64;
  job.schedule = {ScheduleKind::GPipe, 1, 1, 4};
  job.recompute.kind = recompute;
  return job;
}

PlanResult plan_on(double device_memory) {
  SimulationSetup base;
  base.cluster = one_node(1, "h100");
  base.cluster.device.memory_bytes = device_memory;
  base.iterations = 4;
  return plan_jobs(one_device_space(), base);
}

TEST(PlannerMemory, RecomputesOnlyWhenNothingFitsWithoutAndThenAsLittleAsFits) {
  const double none = job_memory_bytes(one_device_job(RecomputeKind::None), Precision::Bf16)[0];
  const double selective = job_memory_bytes(one_device_job(RecomputeKind::Selective), Precision::Bf16)[0];
  const double full = job_memory_bytes(one_device_job(RecomputeKind::Full), Precision::Bf16)[0];
  ASSERT_GT(none, selective);
  ASSERT_GT(selective, full);

  // Room for everything: recomputing only costs time, so the fastest plan recomputes nothing.
  const PlanResult roomy = plan_on(2 * none);
  ASSERT_EQ(roomy.candidates.size(), 3u);
  EXPECT_EQ(roomy.rejected_memory, 0);
  EXPECT_EQ(roomy.candidates[0].job.recompute.kind, RecomputeKind::None);
  EXPECT_EQ(roomy.candidates[1].job.recompute.kind, RecomputeKind::Selective);
  EXPECT_EQ(roomy.candidates[2].job.recompute.kind, RecomputeKind::Full);
  EXPECT_GT(roomy.candidates[0].tokens_per_s, roomy.candidates[1].tokens_per_s);
  EXPECT_DOUBLE_EQ(roomy.candidates[0].max_stage_memory, none);

  // Between none and selective: only recomputation fits, and selective (the smaller rerun) wins.
  const PlanResult tight = plan_on((none + selective) / 2);
  ASSERT_EQ(tight.candidates.size(), 2u);
  EXPECT_EQ(tight.rejected_memory, 1);
  EXPECT_EQ(tight.candidates[0].job.recompute.kind, RecomputeKind::Selective);
  EXPECT_DOUBLE_EQ(tight.candidates[0].max_stage_memory, selective);

  // Between selective and full: full recomputation is the only plan.
  const PlanResult tighter = plan_on((selective + full) / 2);
  ASSERT_EQ(tighter.candidates.size(), 1u);
  EXPECT_EQ(tighter.rejected_memory, 2);
  EXPECT_EQ(tighter.candidates[0].job.recompute.kind, RecomputeKind::Full);

  // Below full: nothing fits, and the message names what was searched and the smallest need.
  try {
    plan_on(full / 2);
    FAIL() << "expected DoesNotFit";
  } catch (const DoesNotFit& e) {
    EXPECT_NE(std::string(e.what()).find("recompute none/selective/full"), std::string::npos) << e.what();
  }
}

TEST(PlannerMemory, BlockRecomputesTheFewestLayersThatFit) {
  const auto memory_with = [](int block_layers) {
    JobSpec job = one_device_job(RecomputeKind::Full);
    job.recompute.method = RecomputeMethod::Block;
    job.recompute.layers = block_layers;
    return job_memory_bytes(job, Precision::Bf16)[0];
  };
  const double none = job_memory_bytes(one_device_job(RecomputeKind::None), Precision::Bf16)[0];
  ASSERT_GT(memory_with(2), memory_with(3));  // each more layer recomputed keeps only its output
  PlanSpace space = one_device_space();
  space.recompute = {RecomputeKind::Full};
  space.recompute_fewest_block = true;
  SimulationSetup base;
  base.cluster = one_node(1, "h100");
  base.cluster.device.memory_bytes = (memory_with(2) + memory_with(3)) / 2;
  base.iterations = 4;
  const PlanResult result = plan_jobs(space, base);
  // Three layers of eight rerun beat all eight (uniform full).
  ASSERT_EQ(result.candidates.size(), 2u);
  EXPECT_EQ(result.candidates[0].job.recompute,
            (RecomputeOptions{RecomputeKind::Full, RecomputeMethod::Block, 3}));
  EXPECT_EQ(result.candidates[1].job.recompute.method, RecomputeMethod::Uniform);
  EXPECT_GT(result.candidates[0].tokens_per_s, result.candidates[1].tokens_per_s);
  // Where the job fits without recomputation the block search adds nothing.
  space.recompute = {RecomputeKind::None};
  base.cluster.device.memory_bytes = none;
  const PlanResult roomy = plan_jobs(space, base);
  ASSERT_EQ(roomy.candidates.size(), 1u);
  EXPECT_EQ(roomy.candidates[0].job.recompute.kind, RecomputeKind::None);
}

TEST(PlannerMemory, TheSearchCanBeRestrictedToTheFeaturesAsked) {
  PlanSpace space = one_device_space();
  space.recompute = {RecomputeKind::None};
  SimulationSetup base;
  base.cluster = one_node(1, "h100");
  base.iterations = 4;
  const PlanResult result = plan_jobs(space, base);
  ASSERT_EQ(result.candidates.size(), 1u);
  EXPECT_EQ(result.candidates[0].job.recompute.kind, RecomputeKind::None);
  // Asked for the distributed optimizer only: at dp 1 it has nothing to shard, so the one job is
  // the replicated one (not dropped, not tried twice).
  space.distributed_optimizer = {true};
  const PlanResult asked_on = plan_jobs(space, base);
  ASSERT_EQ(asked_on.candidates.size(), 1u);
  EXPECT_FALSE(asked_on.candidates[0].job.distributed_optimizer);
  space.distributed_optimizer = {false, true};
  // Four devices: the distributed optimizer is tried only where dp > 1, sequence parallelism only
  // where tp > 1, and each such candidate is the other's twin but for the feature.
  space.global_batch = 8;
  space.sequence_parallel = {false, true};
  base.cluster = one_node(4, "h100");
  const PlanResult four = plan_jobs(space, base);
  int zero = 0, sp = 0;
  for (const PlanCandidate& c : four.candidates) {
    if (c.job.distributed_optimizer) {
      EXPECT_GT(c.job.dp, 1);
      ++zero;
    }
    if (c.job.sequence_parallel) {
      EXPECT_GT(c.job.tp, 1);
      ++sp;
    }
  }
  EXPECT_GT(zero, 0);
  EXPECT_GT(sp, 0);
}

}  // namespace
}  // namespace pipelane::sim
