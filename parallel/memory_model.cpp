#include "parallel/memory_model.h"

#include <stdexcept>

#include "model/gpt_model.h"
#include "parallel/layer_split.h"
#include "parallel/optimizer_shards.h"
#include "parallel/sharded_adamw.h"
#include "runtime/arena.h"
#include "runtime/backend_registry.h"

namespace pipelane {

namespace {

// GptStage asks its tensor-parallel group only for rank and size when sizing; nothing is reduced.
class SizingGroup final : public TensorParallelComm {
 public:
  SizingGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, std::size_t) override { throw std::logic_error("memory model: no collectives"); }
  void all_reduce_max(float*, std::size_t) override { throw std::logic_error("memory model: no collectives"); }
  void all_gather(const float*, float*, std::size_t) override { throw std::logic_error("memory model: no collectives"); }
  void reduce_scatter_sum(float*, std::size_t) override { throw std::logic_error("memory model: no collectives"); }

 private:
  int rank_, size_;
};

double aligned(double bytes) {
  return static_cast<double>(align_up(static_cast<std::size_t>(bytes), Arena::kDefaultAlignment));
}

}  // namespace

RankMemory predict_rank_memory(const MemorySpec& spec, int stage, int tp_rank, Backend& sizing) {
  if (spec.tp < 1 || spec.micro_batch < 1 || spec.seq_len < 1 || spec.optimizer_shards < 1)
    throw std::invalid_argument("memory model: tp, micro_batch, seq_len and optimizer_shards must be >= 1");
  if (spec.sequence_parallel && spec.tp < 2)
    throw std::invalid_argument("memory model: sequence parallelism needs tp > 1");
  if (spec.sequence_parallel && (static_cast<long long>(spec.micro_batch) * spec.seq_len) % spec.tp != 0)
    throw std::invalid_argument("memory model: sequence parallelism needs tp to divide micro_batch * seq_len");
  if (spec.element_bytes != 4 && spec.element_bytes != 2)
    throw std::invalid_argument("memory model: element_bytes " + std::to_string(spec.element_bytes) + ": expected 4 or 2");
  if (spec.storage != DType::F32 && spec.storage != DType::BF16)
    throw std::invalid_argument(std::string("memory model: storage ") + dtype_name(spec.storage) + ": expected f32 or bf16");
  if (spec.storage == DType::BF16 && spec.element_bytes != 4)
    throw std::invalid_argument("memory model: storage bf16 is sized as allocated: element_bytes must be 4");
  if (spec.gemm_weights == DType::BF16 && spec.element_bytes != 4)
    throw std::invalid_argument("memory model: bf16 GEMM weights are sized as allocated: element_bytes must be 4");
  validate_schedule_spec(spec.schedule);
  const ScheduleSpec& sched = spec.schedule;
  if (stage < 0 || stage >= sched.pp || tp_rank < 0 || tp_rank >= spec.tp)
    throw std::invalid_argument("memory model: no stage " + std::to_string(stage) + ", tp rank " + std::to_string(tp_rank));
  const std::vector<StageRange> ranges = split_layers(spec.model.layers, sched.pp, sched.virtual_stages, spec.layers_per_stage);
  const std::vector<int> in_flight = inflight_peak_per_chunk(build_schedule(sched, stage), sched);
  const bool split = backward_is_split(sched.kind);
  const std::unique_ptr<Stream> stream = sizing.create_stream(StreamPriority::Low);
  SizingGroup group(tp_rank, spec.tp);
  // Activations, scratch and messages are fp32 in the layout; 16-bit storage halves them.
  const double storage = spec.element_bytes / 4.0;
  const double message_floats = static_cast<double>(spec.micro_batch) * spec.seq_len * spec.model.d_model;
  RankMemory r;
  r.stage = stage;
  r.tp_rank = tp_rank;
  for (int c = 0; c < sched.virtual_stages; ++c) {
    ChunkMemory ch;
    ch.virtual_stage = virtual_stage(sched, stage, c);
    ch.range = ranges[ch.virtual_stage];
    ch.in_flight = in_flight[c];
    const GptStage model(spec.model, ch.range, sizing, *stream, spec.tp > 1 ? &group : nullptr, spec.recompute,
                         spec.sequence_parallel, spec.storage);
    ch.parameters = aligned(model.layout().total_floats() * 4.0) / 4.0;
    ch.activation_bytes = model.activation_bytes(spec.micro_batch, spec.seq_len, split) * storage;
    ch.scratch_bytes = model.scratch_bytes(spec.micro_batch, spec.seq_len) * storage;
    ch.message_bytes =
        aligned(message_floats / (spec.sequence_parallel ? spec.tp : 1) * static_cast<double>(dtype_size(spec.storage))) *
        storage;
    const double P = ch.parameters;
    // The distributed optimizer's shard: this dp rank's pieces and the tails every rank keeps
    // (parallel/optimizer_shards.h), as the executor allocates it.
    // Sharded masters (model/stage_weights.h): the tensors the passes read outside GEMMs are packed
    // in fp32, and the plan cuts them out as segments of their own.
    const bool sharded_masters = masters_sharded(spec);
    const Fp32Reads reads = sharded_masters ? Fp32Reads::of(model.layout()) : Fp32Reads{};
    const ShardPlan plan = plan_chunk_shards(model.layout(), spec.optimizer_shards, spec.optimizer_bucket_floats,
                                             sharded_masters ? &reads : nullptr);
    const double S = spec.optimizer_shards == 1 ? P : aligned(plan.shard_floats * 4.0) / 4.0;
    if (sharded_masters) {
      // The bf16 copy and the packed fp32 tensors; the masters' shard and the buffer their fp32
      // all-gather goes through.
      r.weights += aligned(model.layout().total_floats() * 2.0) + aligned(reads.floats * 4.0);
      r.master_weights += S * 4.0 + aligned(ShardedAdamW::gather_floats(plan) * 4.0);
    } else if (spec.gemm_weights == DType::BF16) {
      // The GEMMs' bf16 copy of the weights beside the fp32 parameters, which are then the masters.
      r.weights += aligned(model.layout().total_floats() * 2.0);
      r.master_weights += P * 4.0;
    } else {
      r.weights += P * spec.element_bytes;
      r.master_weights += spec.element_bytes == 4 ? 0.0 : S * 4.0;
    }
    r.gradients += P * spec.element_bytes;
    r.optimizer += S * 8.0;
    r.scratch += ch.scratch_bytes;
    r.activations += ch.in_flight * ch.activation_bytes;
    r.messages += ch.in_flight * 3 * ch.message_bytes;
    r.chunks.push_back(ch);
  }
  return r;
}

std::unique_ptr<Backend> make_sizing_backend(const MemorySpec& spec) {
  BackendOptions options;
  options.threads = 1;
  options.compute = spec.storage == DType::BF16 ? DType::BF16 : DType::F32;
  return BackendRegistry::with_builtins().create("cpu", options);
}

std::vector<RankMemory> predict_memory(const MemorySpec& spec, Backend& sizing) {
  std::vector<RankMemory> out;
  for (int s = 0; s < spec.schedule.pp; ++s) out.push_back(predict_rank_memory(spec, s, 0, sizing));
  return out;
}

double layer_activation_bytes(const MemorySpec& spec, Backend& sizing) {
  const std::unique_ptr<Stream> stream = sizing.create_stream(StreamPriority::Low);
  SizingGroup group(0, spec.tp);
  TensorParallelComm* tp = spec.tp > 1 ? &group : nullptr;
  // A stage of one layer minus a stage of none: the layer's buffers alone.
  const GptStage one(spec.model, {0, 1, false, false}, sizing, *stream, tp, spec.recompute, spec.sequence_parallel,
                     spec.storage);
  const GptStage none(spec.model, {0, 0, false, false}, sizing, *stream, tp, spec.recompute, spec.sequence_parallel,
                      spec.storage);
  const bool split = backward_is_split(spec.schedule.kind);
  const double bytes = static_cast<double>(one.activation_bytes(spec.micro_batch, spec.seq_len, split)) -
                       static_cast<double>(none.activation_bytes(spec.micro_batch, spec.seq_len, split));
  return bytes * spec.element_bytes / 4.0;
}

std::string describe_memory_features(const MemorySpec& spec) {
  std::string out;
  const auto add = [&](const std::string& feature) { out += (out.empty() ? "" : ", ") + feature; };
  if (spec.recompute.kind != RecomputeKind::None) add("recompute " + describe(spec.recompute));
  if (spec.optimizer_shards > 1) add("distributed optimizer over dp " + std::to_string(spec.optimizer_shards));
  if (spec.sequence_parallel && spec.tp > 1) add("sequence parallel");
  if (spec.storage == DType::BF16) add("bf16 storage (activations and messages)");
  if (spec.gemm_weights == DType::BF16) add("bf16 GEMM weights");
  return out;
}

double korthikanti_layer_activation_bytes(const MemorySpec& spec) {
  const double s = spec.seq_len, b = spec.micro_batch, h = spec.model.d_model, a = spec.model.heads;
  const double t = spec.tp;
  // Of the 34: 24 are inside the tensor-parallel blocks (split by t), 10 (the norms, the dropouts'
  // masks and the residual inputs) are split only with sequence parallelism.
  const double unsplit = spec.sequence_parallel ? 10 / t : 10;
  switch (spec.recompute.kind) {
    case RecomputeKind::None: return s * b * h * (unsplit + 24 / t + 5 * a * s / (h * t));
    case RecomputeKind::Selective: return s * b * h * (unsplit + 24 / t);
    case RecomputeKind::Full: return 2 * s * b * h / (spec.sequence_parallel ? t : 1);
  }
  return 0;
}

}  // namespace pipelane
