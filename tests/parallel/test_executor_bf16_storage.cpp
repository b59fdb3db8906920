// bf16 storage ([train] storage = bf16) through the executor, as threads of this process: against
// fp32 (and against bf16 compute with fp32 storage, autocast) on pp 2 with each schedule, tp x pp
// and dp x pp. It trains within llm.c's bf16 loss tolerance of fp32; every stage-to-stage message
// is half the bytes (the instruction records the trace is written from); the arena holds exactly
// what the memory model predicted, with half the activation bytes; and recomputation, lanes and a
// bf16 copy of the GEMMs' weights leave its results bit for bit as they are.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/parallel/threaded_executor_job.h"

namespace pipelane {
namespace {

using threaded_job::JobOut;
using threaded_job::JobSpec;

struct Case {
  const char* name;
  ParallelDims dims;
  ScheduleKind kind;
  int v;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

JobSpec spec_for(const Case& c, DType compute, DType storage, RecomputeOptions rc = {}, bool filler = false) {
  JobSpec s = threaded_job::tiny_job(c.dims, c.kind, c.v);
  s.options.recompute = rc;
  s.options.storage = storage;
  s.steps = 4;
  s.filler = filler;
  s.compute = compute;
  return s;
}

class Bf16Storage : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Storage, TrainsWithinBf16ToleranceOfFp32WithHalfTheBytesAsPredicted) {
  const Case& c = GetParam();
  const JobOut fp32 = threaded_job::run(spec_for(c, DType::F32, DType::F32));
  const JobOut autocast = threaded_job::run(spec_for(c, DType::BF16, DType::F32));
  const JobOut stored = threaded_job::run(spec_for(c, DType::BF16, DType::BF16));
  ASSERT_EQ(stored.loss.size(), fp32.loss.size());
  bool differs_from_autocast = false;
  for (std::size_t s = 0; s < fp32.loss.size(); ++s) {
    const double scale = 1.0 / (4 * 2 * 16);
    const double f = fp32.loss[s] * scale, a = autocast.loss[s] * scale, b = stored.loss[s] * scale;
    std::printf("%s step %zu: loss fp32 %.7f, bf16 compute %.7f, bf16 storage %.7f\n", c.name, s + 1, f, a, b);
    EXPECT_TRUE(std::isfinite(b) && std::isfinite(stored.grad_norm[s])) << "step " << s + 1;
    // llm.c's test_gpt2.cu accepts a bf16 run's per-step loss within 0.05 of the fp32 reference.
    EXPECT_NEAR(b, f, 0.05) << c.name << " step " << s + 1;
    differs_from_autocast |= std::memcmp(&stored.loss[s], &autocast.loss[s], sizeof(double)) != 0;
  }
  EXPECT_TRUE(differs_from_autocast) << "bf16 storage is not on: its losses equal fp32 storage's bit for bit";
  EXPECT_LT(stored.loss.back(), stored.loss.front()) << "it does not train";
  for (int r = 0; r < c.dims.world(); ++r) {
    const threaded_job::RankOut &f = fp32.ranks[r], &b = stored.ranks[r];
    // The same transfers, each half the bytes: bf16 activations forward, bf16 gradients backward.
    ASSERT_EQ(b.transfer_bytes.size(), f.transfer_bytes.size()) << "rank " << r;
    for (std::size_t k = 0; k < f.transfer_bytes.size(); ++k)
      ASSERT_EQ(2 * b.transfer_bytes[k], f.transfer_bytes[k]) << "rank " << r << " transfer " << k;
    EXPECT_EQ(b.high_water, b.predicted) << "rank " << r;
    std::printf("%s rank %d: arena %zu bytes fp32, %zu bf16 compute, %zu bf16 storage; activations predicted "
                "%.0f -> %.0f\n",
                c.name, r, f.high_water, autocast.ranks[r].high_water, b.high_water, f.activations, b.activations);
    // Less: a layer's values are halved (measured per layer below); what stays fp32 is the norms'
    // statistics, the head's buffers (the final norm's output, the losses, the head's gradient)
    // and the split backward's gradients.
    EXPECT_LT(b.activations, f.activations) << "rank " << r;
  }
}

// Recomputation reruns the same kernels and rounds what it reruns as storage rounds what it keeps;
// a gap filler computes in every wait. Neither may change a bit under bf16 storage.
TEST_P(Bf16Storage, RecomputeAndLanesChangeNoBit) {
  const Case& c = GetParam();
  const JobOut none = threaded_job::run(spec_for(c, DType::BF16, DType::BF16));
  const RecomputeOptions kinds[] = {{RecomputeKind::Selective, RecomputeMethod::Uniform, 1},
                                    {RecomputeKind::Full, RecomputeMethod::Uniform, 1},
                                    {RecomputeKind::Full, RecomputeMethod::Block, 1}};
  for (const RecomputeOptions& rc : kinds) {
    const std::string what = std::string(c.name) + " " + describe(rc);
    const JobOut got = threaded_job::run(spec_for(c, DType::BF16, DType::BF16, rc, /*filler=*/true));
    EXPECT_GT(got.filler_steps, 0) << what;
    EXPECT_EQ(got.loss, none.loss) << what;  // exact
    EXPECT_EQ(got.grad_norm, none.grad_norm) << what;
    for (int r = 0; r < c.dims.world(); ++r) {
      EXPECT_TRUE(got.ranks[r].params == none.ranks[r].params) << what << " rank " << r << " parameters";
      EXPECT_TRUE(got.ranks[r].grads == none.ranks[r].grads) << what << " rank " << r << " gradients";
      EXPECT_EQ(got.ranks[r].high_water, got.ranks[r].predicted) << what << " rank " << r;
    }
  }
}

// [train] gemm_weights = bf16: the GEMMs read a bf16 copy of the parameters, made again after every
// optimizer step (under the distributed optimizer from the all-gathered masters). The same values
// as the GEMMs' own rounding, so every step keeps every bit; the arena holds as predicted, without
// the distributed optimizer 2 bytes a parameter more.
TEST_P(Bf16Storage, Bf16GemmWeightsChangeNoBitForTwoBytesAParameter) {
  const Case& c = GetParam();
  for (bool zero : {false, true}) {
    if (zero && c.dims.dp == 1) continue;
    JobSpec plain = spec_for(c, DType::BF16, DType::BF16);
    plain.options.distributed_optimizer = zero;
    // Under the distributed optimizer bf16 GEMM weights shard the masters too, and the shard plan
    // then cuts the norms and biases out as segments of their own: the global norm is summed from
    // other pieces, in another order. With clipping off the updates do not depend on it.
    if (zero) plain.options.grad_clip = 0.f;
    JobSpec copied = plain;
    copied.options.gemm_weights = DType::BF16;
    const std::string what = std::string(c.name) + (zero ? " distributed optimizer" : "");
    const JobOut a = threaded_job::run(plain), b = threaded_job::run(copied);
    EXPECT_EQ(b.loss, a.loss) << what;  // exact, over 4 steps: the copy follows every update
    if (!zero) EXPECT_EQ(b.grad_norm, a.grad_norm) << what;
    // The same squares (exact in double) summed in two orders: each within gamma_K = K u / (1 - K u)
    // of the exact sum, K < 2.2 x 10^5 additions here ((the model's ~53k parameters, twice, and the
    // world's 4 ranks) times dp 2), u = 2^-53: under 2.5e-11 each, and the square roots add u.
    for (std::size_t s = 0; zero && s < a.grad_norm.size(); ++s)
      EXPECT_NEAR(b.grad_norm[s], a.grad_norm[s], 5e-11 * a.grad_norm[s]) << what << " step " << s + 1;
    for (int r = 0; r < c.dims.world(); ++r) {
      EXPECT_TRUE(b.ranks[r].params == a.ranks[r].params) << what << " rank " << r << " parameters";
      EXPECT_EQ(b.ranks[r].high_water, b.ranks[r].predicted) << what << " rank " << r;
      // Under the distributed optimizer the masters are sharded as well: what that saves is
      // checked in test_executor_zero (ShardedMasters*).
      if (zero) continue;
      // 2 bytes a parameter, each chunk's copy aligned to 64 bytes.
      const std::size_t params = b.ranks[r].params.size();
      EXPECT_GE(b.ranks[r].high_water - a.ranks[r].high_water, 2 * params) << what << " rank " << r;
      EXPECT_LT(b.ranks[r].high_water - a.ranks[r].high_water, 2 * params + 64 * 2) << what << " rank " << r;
    }
  }
}

// One layer's activations, as the memory model sizes them from GptStage's layout: every value a layer
// keeps is halved; what stays fp32 is the norms' statistics (4 floats a row for GPT-2's two
// LayerNorms, 2 for Llama's RMSNorms, against 16*C + heads*T = 576 value floats a row for GPT-2 and
// more for Llama's SwiGLU) and each buffer's alignment (under 64 bytes on each of ~15 buffers,
// against ~37 KiB of values): 0.5 plus under 1%.
TEST(Bf16StorageMemory, ALayerKeepsHalfItsBytes) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  for (const GptConfig& model : {threaded_job::tiny_gpt(), threaded_job::tiny_gpt(ModelArch::Llama)}) {
    MemorySpec spec;
    spec.model = model;
    spec.micro_batch = 2;
    spec.seq_len = 16;
    const double fp32 = layer_activation_bytes(spec, *cpu);
    spec.storage = DType::BF16;
    const double bf16 = layer_activation_bytes(spec, *cpu);
    std::printf("%s: one layer keeps %.0f bytes in fp32, %.0f in bf16 (%.4f)\n", arch_name(model.arch), fp32, bf16,
                bf16 / fp32);
    EXPECT_GE(bf16, 0.5 * fp32);
    EXPECT_LE(bf16, 0.51 * fp32);
  }
}

// bf16 storage without an fp32 workspace: on a backend whose ops write and read every value a
// layer keeps in bf16 themselves (the CPU's in bf16 compute, which bf16 storage runs in) each goes
// straight to the layer's bf16 buffers - the norms' outputs, q/k/v and the MLP's GEMM outputs (made
// in fp32 scratch that backward fills only later, cast once forward has read them), the
// attention's probabilities and output, the MLP's activation - and the residual stream is made in
// place in the layer's widened input. So scratch under bf16 storage is the fp32 scratch plus the
// widened input and the input gradient ([N, C] each) and nothing else; with selective
// recomputation the rerun's probabilities are bf16 scratch too. Under full recomputation the
// rerun's own workspace keeps its probabilities in bf16.
TEST(Bf16StorageMemory, NoFp32LayerWorkspaceIsLeft) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend(1, DType::BF16);
  const std::unique_ptr<Stream> stream = cpu->create_stream(StreamPriority::High);
  const int B = 2, T = 16;
  const auto aligned_floats = [](std::size_t n) { return align_up(n * sizeof(float), Arena::kDefaultAlignment); };
  for (const GptConfig& model : {threaded_job::tiny_gpt(), threaded_job::tiny_gpt(ModelArch::Llama)}) {
    SCOPED_TRACE(arch_name(model.arch));
    ASSERT_TRUE(cpu->supports(OpKind::AttentionForward, DType::BF16));
    const StageRange one_layer{0, 1, false, false};
    const std::size_t probabilities = static_cast<std::size_t>(B) * model.heads * T * T;
    const std::size_t rows = aligned_floats(static_cast<std::size_t>(B) * T * model.d_model);
    for (const RecomputeKind kind : {RecomputeKind::None, RecomputeKind::Selective, RecomputeKind::Full}) {
      const RecomputeOptions recompute{kind};
      const GptStage fp32(model, one_layer, *cpu, *stream, nullptr, recompute);
      const GptStage bf16(model, one_layer, *cpu, *stream, nullptr, recompute, false, DType::BF16);
      EXPECT_EQ(bf16.bf16_direct_values() | 1u << layer_value_index(&LayerActivations::res_out),
                (1u << kLayerValueCount) - 1)
          << "every value but the output (s.storage_x) goes to bf16 directly";
      std::size_t want = fp32.scratch_bytes(B, T) + 2 * rows;
      if (kind != RecomputeKind::None)  // the rerun's probabilities: fp32 -> bf16
        want = want - aligned_floats(probabilities) + aligned_floats((probabilities + 1) / 2);
      EXPECT_EQ(bf16.scratch_bytes(B, T), want) << recompute_kind_name(kind);
    }
  }
}

const Case kCases[] = {
    {"pp2_1f1b", {1, 1, 2}, ScheduleKind::OneFOneB, 1},
    {"pp2_zbh1", {1, 1, 2}, ScheduleKind::ZeroBubbleH1, 1},
    {"pp2_interleaved", {1, 1, 2}, ScheduleKind::Interleaved, 2},
    {"tp2_pp2", {2, 1, 2}, ScheduleKind::OneFOneB, 1},
    {"dp2_pp2", {1, 2, 2}, ScheduleKind::OneFOneB, 1},
};
INSTANTIATE_TEST_SUITE_P(Grids, Bf16Storage, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Parameters written through chunk_states() (a checkpoint's load) after a pass has made the bf16
// copy: the next pass makes it again. An evaluation makes the copy, the parameters are halved, and
// the steps that follow train exactly as with fp32 GEMM weights given the same halving.
TEST(Bf16GemmWeights, ParametersWrittenThroughChunkStatesAreCopiedAgain) {
  const Case& c = kCases[0];
  std::vector<std::vector<double>> losses;
  for (DType weights : {DType::F32, DType::BF16}) {
    JobSpec s = spec_for(c, DType::BF16, DType::BF16);
    s.options.gemm_weights = weights;
    s.before_steps = [](PipelineExecutor& exec, const Topology&) {
      const std::vector<std::int32_t> tokens(2 * 16, 1);
      exec.evaluate_sum(tokens.data(), tokens.data(), 1);  // a pass: the copy is made
      for (const ChunkState& chunk : exec.chunk_states()) {
        std::vector<float> host(chunk.layout->total_floats());
        exec.backend().copy(host.data(), chunk.params, host.size() * sizeof(float), exec.compute_stream());
        exec.compute_stream().synchronize();
        for (float& x : host) x *= 0.5f;
        exec.backend().copy(chunk.params, host.data(), host.size() * sizeof(float), exec.compute_stream());
      }
      exec.compute_stream().synchronize();
    };
    losses.push_back(threaded_job::run(s).loss);
  }
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_NE(losses[0], threaded_job::run(spec_for(c, DType::BF16, DType::BF16)).loss) << "the halving did nothing";
}

}  // namespace
}  // namespace pipelane
