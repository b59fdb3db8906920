#include "parallel/sim/job_shape.h"

#include "runtime/backend_registry.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "model/gpt_layout.h"
#include "model/gpt_model.h"
#include "model/stage_weights.h"
#include "parallel/layer_split.h"
#include "parallel/optimizer_shards.h"

namespace pipelane::sim {

bool JobSpec::masters_sharded() const {
  return pipelane::masters_sharded(gemm_weights, optimizer_shards());
}

namespace {

// Sizing only: GptStage asks a tensor-parallel group for its size; nothing is ever reduced.
class SizingGroup final : public TensorParallelComm {
 public:
  explicit SizingGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, std::size_t) override { throw std::logic_error("sizing group: no collectives"); }
  void all_reduce_max(float*, std::size_t) override { throw std::logic_error("sizing group: no collectives"); }
  void all_gather(const float*, float*, std::size_t) override { throw std::logic_error("sizing group: no collectives"); }
  void reduce_scatter_sum(float*, std::size_t) override { throw std::logic_error("sizing group: no collectives"); }

 private:
  int size_;
};

// Layers of a stage range that rerun something before their backward: (attention cores,
// whole layers), by the recompute plan the stage itself follows.
std::pair<int, int> rerun_layers(const RecomputeOptions& recompute, int num_layers) {
  int cores = 0, layers = 0;
  if (num_layers < 1 || recompute.kind == RecomputeKind::None) return {0, 0};
  for (const LayerRecompute& l : plan_recompute(recompute, num_layers)) {
    cores += l.keeps == LayerKeeps::AllButAttentionCore;
    layers += l.keeps == LayerKeeps::Output;
  }
  return {cores, layers};
}

}  // namespace

JobShape job_shape(const JobSpec& job) {
  const GptConfig& cfg = job.model;
  if (const std::string problem = cfg.problem(); !problem.empty()) throw std::invalid_argument("model: " + problem);
  if (job.tp < 1 || job.dp < 1 || job.micro_batch < 1 || job.seq_len < 1)
    throw std::invalid_argument("tp, dp, micro_batch and seq_len must be >= 1");
  if (job.recompute.layers < 1)
    throw std::invalid_argument("recompute_layers = " + std::to_string(job.recompute.layers) + ": expected >= 1");
  if (cfg.heads % job.tp != 0)
    throw std::invalid_argument("tp = " + std::to_string(job.tp) + " does not divide the model's " +
                                std::to_string(cfg.heads) + " heads");
  if (job.seq_len > cfg.max_seq_len)
    throw std::invalid_argument("seq_len " + std::to_string(job.seq_len) + " exceeds the model's " +
                                std::to_string(cfg.max_seq_len) + " positions");
  validate_schedule_spec(job.schedule);
  const ScheduleSpec& spec = job.schedule;
  const std::vector<StageRange> ranges =
      split_layers(cfg.layers, spec.pp, spec.virtual_stages, job.layers_per_stage);

  const double N = static_cast<double>(job.micro_batch) * job.seq_len, d = cfg.d_model, T = job.seq_len;
  const double tp = job.tp;
  const double vocab = cfg.padded_vocab_for_tp(job.tp);
  SizingGroup group(job.tp);
  // Sizes only (no compute): the CPU backend's scratch rule for the fused head, as the executor's.
  const std::unique_ptr<Backend> sizing = BackendRegistry::with_builtins().create("cpu", BackendOptions{1, 0});
  const std::unique_ptr<Stream> stream = sizing->create_stream(StreamPriority::Low);
  JobShape shape;
  if (job.sequence_parallel && (job.tp < 2 || static_cast<long long>(N) % job.tp != 0))
    throw std::invalid_argument("sequence parallelism needs tp > 1 dividing micro_batch * seq_len");
  shape.tp_collective_elements = N * d;
  shape.message_elements = job.sequence_parallel ? N * d / tp : N * d;
  for (const StageRange& range : ranges) {
    ChunkShape c;
    c.range = range;
    const double layers = range.num_layers();
    // Per layer and token: 24 d^2 FLOPs of matmuls forward (GPT-2), 4 T d of attention (the REFERENCE
    // formula 6N + 12 L d T split 1:2 between forward and backward); the backward's matmuls split
    // evenly into input and weight gradients, attention's backward is all input gradient.
    // The matrices are the family's (GPT-2: 12 d^2 a layer, 24 d^2 FLOPs; SwiGLU's three and
    // GQA's narrower k/v otherwise).
    const double matmul = 2 * cfg.layer_matrix_params();
    c.fwd_flops = layers * N * (matmul + 4 * T * d) / tp;
    c.bwd_input_flops = layers * N * (matmul + 8 * T * d) / tp;
    c.bwd_weight_flops = layers * N * matmul / tp;
    if (range.has_head) c.fwd_flops += 6 * N * d * vocab / tp;  // head forward + backward, fused
    c.tp_all_reduces_fwd = job.tp > 1 ? 2 * range.num_layers() : 0;
    c.tp_all_reduces_bwd = job.tp > 1 ? 2 * range.num_layers() : 0;
    // Selective reruns the attention core (its 4 T d of the forward's FLOPs a token), full the
    // whole layer with its two all-reduces; a split backward reruns full layers for W again.
    const auto [cores, full_layers] = rerun_layers(job.recompute, range.num_layers());
    c.rerun_b_flops = N * (cores * 4 * T * d + full_layers * (matmul + 4 * T * d)) / tp;
    c.rerun_b_all_reduces = job.tp > 1 ? 2 * full_layers : 0;
    if (job.split_backward()) {
      c.rerun_w_flops = N * full_layers * (matmul + 4 * T * d) / tp;
      c.rerun_w_all_reduces = c.rerun_b_all_reduces;
    }
    // Sequence parallelism, per layer (GptStage): forward 2 all-gathers + 2 reduce-scatters (2
    // all-reduces' bytes); backward also all-gathers the residual gradient before each sublayer
    // and the norm output again for the weight gradients: 4 all-gathers + 2 reduce-scatters (3).
    // Split, B gathers the residual gradients (2) and W gathers both again (2).
    if (job.sequence_parallel && !job.split_backward()) c.tp_all_reduces_bwd = 3 * range.num_layers();
    if (job.sequence_parallel && job.split_backward()) c.tp_all_reduces_bwd_weight = 2 * range.num_layers();
    const GptStage stage(cfg, range, *sizing, *stream, job.tp > 1 ? &group : nullptr, {}, job.sequence_parallel);
    c.params = static_cast<double>(stage.layout().total_floats());
    // The shard plan the executor makes: with sharded masters the fp32-read tensors are cut out
    // as segments of their own (parallel/optimizer_shards.h).
    const Fp32Reads reads = job.masters_sharded() ? Fp32Reads::of(stage.layout()) : Fp32Reads{};
    c.fp32_read_params = static_cast<double>(reads.floats);
    c.optimizer_params =
        job.optimizer_shards() > 1
            ? static_cast<double>(plan_chunk_shards(stage.layout(), job.optimizer_shards(), kShardBucketFloats,
                                                    job.masters_sharded() ? &reads : nullptr)
                                      .shard_floats)
            : c.params;
    if (const ParamEntry* wte = stage.layout().tied_embedding(); wte && (range.has_embedding != range.has_head))
      c.tied_embedding_params = static_cast<double>(wte->numel);
    shape.virtual_stages.push_back(c);
  }
  for (int s = 0; s < spec.pp; ++s)
    shape.in_flight.push_back(inflight_peak_per_chunk(build_schedule(spec, s), spec));
  return shape;
}

double JobShape::stage_params(const ScheduleSpec& spec, int stage) const {
  double params = 0;
  for (int c = 0; c < spec.virtual_stages; ++c) params += chunk(spec, stage, c).params;
  return params;
}

double JobShape::stage_optimizer_params(const ScheduleSpec& spec, int stage) const {
  double params = 0;
  for (int c = 0; c < spec.virtual_stages; ++c) params += chunk(spec, stage, c).optimizer_params;
  return params;
}

double job_flops_per_iteration(const JobSpec& job, const JobShape& shape) {
  double per_microbatch = 0;
  for (const ChunkShape& c : shape.virtual_stages)
    per_microbatch += c.fwd_flops + c.bwd_input_flops + c.bwd_weight_flops;
  return per_microbatch * job.tp * job.schedule.microbatches * job.dp;
}

}  // namespace pipelane::sim
