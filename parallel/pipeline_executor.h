// Runs one pipeline stage's instruction list (parallel/schedule) with its model chunks and the
// stage's communication planes: activations and gradients travel as contiguous buffers on the
// data plane, every instruction is timed, and every wait is recorded with its kind. It owns all of
// the stage's training memory in one backend arena sized up front from the model's size tables,
// and two streams: training compute (highest priority) and communication.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/gpt_model.h"
#include "parallel/gap_filler.h"
#include "parallel/layer_split.h"
#include "parallel/memory_model.h"
#include "parallel/optimizer_shards.h"
#include "parallel/progress_watchdog.h"
#include "parallel/schedule.h"
#include "parallel/topology.h"
#include "parallel/wan_schedule.h"
#include "runtime/backend.h"

namespace pipelane {

struct ExecutorOptions {
  GptConfig model;
  ScheduleSpec schedule;
  int micro_batch = 1;
  int seq_len = 1;
  std::string layers_per_stage;  // see split_layers
  std::uint64_t seed = 0;
  AdamWConfig adamw;
  float grad_clip = 1.0f;
  // This rank's transfers across sites (parallel/wan_schedule.h): the list is lowered with it, so
  // cross-site messages are striped and, under temporal sharing, sent in turn. None: one site.
  std::optional<WanRoute> wan;
  // What each layer keeps for backward (model/recompute.h); none: everything, as always.
  RecomputeOptions recompute;
  // Sequence parallelism beside tensor parallelism (GptStage; needs tp > 1 and tp dividing
  // micro_batch * seq_len): the residual stream, the norms and the p2p messages split by rows
  // over the tp ranks.
  bool sequence_parallel = false;
  // F32, or BF16 ([train] storage = bf16, with a backend of bf16 compute): activations kept in bf16
  // and every stage-to-stage message in bf16, half the bytes (GptStage's storage).
  DType storage = DType::F32;
  // F32, or BF16 ([train] gemm_weights = bf16, with a backend of bf16 compute): the GEMMs read a bf16
  // copy of the parameters (GptStage's StageWeights), made again from the fp32 parameters before
  // they are next read after each optimizer step; the same bits as F32, 2 bytes a parameter more.
  DType gemm_weights = DType::F32;
  // ZeRO-1 over the dp group (parallel/sharded_adamw.h): each dp rank keeps AdamW moments for its
  // shard only, and with gemm_weights = BF16 the fp32 master weights too (the passes then read the
  // bf16 copy and a packed fp32 copy of the tensors read outside GEMMs: the same bits). With dp = 1
  // there is nothing to shard: the replicated optimizer runs, bit for bit.
  bool distributed_optimizer = false;
  std::size_t optimizer_bucket_floats = kShardBucketFloats;  // its buckets (tests make them small)
};

struct InstrRecord {
  Instr instr;
  double start_s = 0, end_s = 0;  // since the executor's clock origin
  double wait_s = 0;              // part of [start, end] spent waiting on a transfer or a sync
  // The process's CPU seconds during it, measured only with a gap filler (the interference
  // estimate's compute, which other processes taking the core must not count); < 0: not measured.
  double cpu_s = -1;
  // A transfer's message (Send/Recv, Fwd or Bwd): its bytes, the stage's storage dtype's (bf16
  // storage: half of fp32's); 0 for every other instruction.
  std::size_t bytes = 0;
};

struct StepStats {
  double loss_sum = 0;   // summed over the whole global batch (every dp replica), all ranks agree
  double grad_norm = 0;  // global, before clipping
  double start_s = 0, end_s = 0;
  bool skipped = false;  // the update gate declined this step: AdamW was not applied
  std::vector<InstrRecord> records;
};

// Asked at OptimizerStep on every rank, with the global loss sum and grad norm (all ranks see the
// same values): true applies the update, false skips it (numerical faults). Every rank must
// return the same answer; the gate may run collectives on the world communicator.
using UpdateGate = std::function<bool(double loss_sum, double grad_norm)>;

// One model chunk's training state, for checkpoints: the layout names every tensor (with its
// tensor-parallel slicing) and the four flat buffers share it.
// The buffers are backend memory (device memory on a GPU): move them with Backend::copy on
// `stream`, never dereference them. Under the distributed optimizer chunk_states() has no moments
// in the layout (adam_m and adam_v null), and with bf16 GEMM weights no parameters either (params
// null: the fp32 masters are sharded too): checkpoint_view() gives them.
struct ChunkState {
  const ParamLayout* layout;
  int virtual_stage;
  float* params;
  float* grads;
  float* adam_m;
  float* adam_v;
};

// The training state in the parameters' layout, for a checkpoint: chunk_states() with adam_m and
// adam_v in the layout. The replicated optimizer's are its training buffers; under the distributed
// optimizer they are full-layout copies in `arena`, alive as long as this object, and so are the
// parameters when the masters are sharded (masters_sharded()). That arena is host memory: a
// checkpoint of a model that fits only because its state is sharded must not need the whole state
// on the device; the gathers go through a buffer of at most 1 MiB.
struct CheckpointView {
  std::vector<ChunkState> chunks;
  std::unique_ptr<Arena> arena;  // null with the replicated optimizer
};

class PipelineExecutor {
 public:
  // The backend and topology must outlive the executor.
  PipelineExecutor(const ExecutorOptions& opts, Topology& topo, Backend& backend);
  ~PipelineExecutor();

  // One optimizer step. tokens/targets hold this dp replica's microbatches back to back
  // ([microbatches][micro_batch * seq_len]); loss_scale is 1 / (tokens in the global batch).
  StepStats step(const std::int32_t* tokens, const std::int32_t* targets, float loss_scale,
                 float lr, int step_number);
  // Forward only over `batches` microbatches; returns the loss sum (all ranks agree).
  double evaluate_sum(const std::int32_t* tokens, const std::int32_t* targets, int batches);

  std::size_t arena_bytes() const;
  // The memory model's prediction the arena was sized with (parallel/memory_model.h), and the
  // arena's high-water mark: what was really carved out of it.
  const RankMemory& predicted_memory() const;
  std::size_t arena_high_water() const;
  std::vector<ChunkState> chunk_states();
  // For a save (collective over dp under the distributed optimizer: every rank's shard of the
  // moments, and of sharded masters, is gathered) or, with gather = false, for a load to fill and
  // then hand to keep_loaded_state (no communication: each rank keeps its shard of what it loaded;
  // the copies' moments start at zero, so a load of parameters alone leaves zero moments).
  CheckpointView checkpoint_view(bool gather);
  // The parameters alone, whole, in the layout (adam_m and adam_v null): the training buffers, or
  // with sharded masters a gathered full-layout copy (collective over dp).
  CheckpointView parameters_view();
  void keep_loaded_state(const CheckpointView& loaded);
  bool optimizer_sharded() const;  // the distributed optimizer runs (dp > 1)
  // ... with bf16 GEMM weights: the fp32 masters are sharded over dp as well, and no rank holds
  // the whole fp32 parameters (chunk_states()' params are null).
  bool masters_sharded() const;
  Backend& backend() const;
  Stream& compute_stream() const;  // the stream ChunkState buffers are ordered on
  // Waits on transfers and on the gradient sync go to `filler` (null: plain blocking waits).
  // The filler must outlive the executor's steps.
  void set_gap_filler(GapFiller* filler);
  std::chrono::steady_clock::time_point clock_origin() const;  // what now_s() counts from
  // Null (the default): every step is applied. Either way the world's loss is summed once a
  // step (with a gate, at OptimizerStep; StepStats::loss_sum is that sum).
  void set_update_gate(UpdateGate gate);
  // Each instruction started (and each evaluation microbatch) is reported to `watchdog` (null:
  // none), naming the peer rank of a transfer, so a stalled job says where it stopped.
  void set_watchdog(ProgressWatchdog* watchdog);
  const std::vector<Instr>& instructions() const;
  double now_s() const;  // on the executor's clock

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pipelane
