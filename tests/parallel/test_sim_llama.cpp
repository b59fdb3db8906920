// The simulator and planner's arithmetic for the Llama family (parallel/sim): a layer's FLOPs
// come from its own matrices (SwiGLU's three, GQA's narrower k and v, GptConfig::
// layer_matrix_params), the job's FLOPs agree with the MFU formula (GptConfig::
// train_flops_per_token), tensor parallelism divides them, and a stage's memory is the
// executor's arena for a Llama as for GPT-2.
#include <gtest/gtest.h>

#include "parallel/pipeline_executor.h"
#include "parallel/sim/job_memory.h"
#include "parallel/sim/job_costs.h"
#include "parallel/sim/job_shape.h"
#include "parallel/topology.h"
#include "tests/parallel/sim_test_shapes.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane::sim {
namespace {

// 8 layers of d 128: 4 query heads on 2 kv heads (hs 32), SwiGLU of width 352, untied head.
GptConfig small_llama() {
  GptConfig c = test_shapes::small_gpt();
  c.arch = ModelArch::Llama;
  c.apply_arch_defaults(ModelArch::Llama);
  c.kv_heads = 2;
  c.ffn_hidden = 352;
  return c;
}

Cluster one_h100_node(int devices) { return test_shapes::one_node(devices, "h100", *builtin_link("nvlink4")); }

TEST(SimLlama, LayerFlopsAreTheFamilysMatricesAndTheJobMatchesTheMfuFormula) {
  const GptConfig model = small_llama();
  ASSERT_EQ(model.problem(), "");
  // q 128x128, k and v 128x64 each, o 128x128, gate/up/down 3 x 128x352 (GPT-2's 12 d^2 would be 196608).
  const double d = 128, matrices = 128.0 * 128 + 2 * 128.0 * 64 + 128.0 * 128 + 3 * 128.0 * 352;
  EXPECT_DOUBLE_EQ(model.layer_matrix_params(), matrices);
  for (const int tp : {1, 2}) {
    SCOPED_TRACE(tp);
    JobSpec job;
    job.model = model;
    job.seq_len = 64;
    job.micro_batch = 2;
    job.tp = tp;
    job.schedule = {ScheduleKind::OneFOneB, 2, 1, 4};
    const JobShape shape = job_shape(job);
    const Cluster cluster = one_h100_node(2 * tp);
    const double N = 2.0 * 64, T = 64;
    // Stage 0: 4 layers; forward 2 x matrices + 4 T d per token, backward twice that (input and
    // weight gradients); split by tp.
    const ChunkShape& first = shape.virtual_stages[0];
    EXPECT_DOUBLE_EQ(first.fwd_flops, 4 * N * (2 * matrices + 4 * T * d) / tp);
    EXPECT_DOUBLE_EQ(first.bwd_input_flops + first.bwd_weight_flops, 4 * N * (4 * matrices + 8 * T * d) / tp);
    if (tp == 1) {  // the op table's compute time is those FLOPs at the device's achieved rate (tp adds all-reduces)
      const OpTable t = device_op_table(job, shape, cluster, AllReduceAlgorithm::Auto);
      const double achieved = cluster.device.achieved_flops();
      EXPECT_NEAR(t.fwd[0][0], first.fwd_flops / achieved, 1e-15);
      EXPECT_NEAR(t.bwd[0][0], (first.bwd_input_flops + first.bwd_weight_flops) / achieved, 1e-15);
    }
    // The whole job's FLOPs (every rank's) agree with the MFU formula up to what it leaves out
    // (norms, RoPE, SwiGLU's elementwise part: tens of FLOPs per channel against ~2 x 3 d of matrices).
    const double expected = model.train_flops_per_token(job.seq_len) * job.tokens_per_iteration();
    EXPECT_NEAR(job_flops_per_iteration(job, shape) / expected, 1.0, 2.0 / d);
  }
}

TEST(SimLlama, StageMemoryIsTheExecutorsArena) {
  Topology topo = Topology::single_process();
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    JobSpec job;
    job.model = small_llama();
    job.seq_len = 32;
    job.micro_batch = 2;
    job.schedule = {kind, 1, 1, 3};
    ExecutorOptions e;
    e.model = job.model;
    e.schedule = job.schedule;
    e.micro_batch = job.micro_batch;
    e.seq_len = job.seq_len;
    const PipelineExecutor executor(e, topo, testing::cpu_backend());
    // The simulator's memory is the memory model's, which sizes the arena.
    EXPECT_DOUBLE_EQ(job_memory_bytes(job, Precision::Fp32)[0], static_cast<double>(executor.arena_bytes()))
        << schedule_kind_name(kind);
  }
}

}  // namespace
}  // namespace pipelane::sim
