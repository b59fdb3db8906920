// The memory model: what one rank's training arena holds, by category, predicted from the model's
// size tables (ParamLayout, GptStage::activation_bytes / scratch_bytes, which the recompute plan
// and the backend's attention rule shape) and the schedule's in-flight bound
// (inflight_peak_per_chunk). The executor sizes its arena with it, `pipelane memory` and
// `pipelane train --dry-run` print it, and every run's summary sets it beside the arena's measured
// high-water mark.
//
// Categories (bytes): weights, master weights, gradients and optimizer state (AdamW's m and v)
// per parameter; scratch (shared by every microbatch, recomputation's workspace included);
// activations and point-to-point message buffers per microbatch in flight.
// Storage: element_bytes = 4 is pipelane's fp32 layout, exactly what the executor allocates;
// element_bytes = 2 predicts the same layout in 16-bit storage (weights and gradients in 16 bits
// beside fp32 master weights, Megatron's mixed precision: the same 16 bytes a parameter), which
// pipelane does not store (its weights and gradients stay fp32).
// storage = BF16 (`[train] storage = bf16`) is what pipelane does store in bf16: the activations a
// layer keeps and the p2p messages (GptStage's bf16 storage), sized exactly as allocated; the
// scratch keeps fp32 workspaces for the layer being computed. gemm_weights = BF16 (`[train]
// gemm_weights = bf16`) adds the bf16 copy of the weights that the GEMMs read (`weights`, 2 bytes a
// parameter, beside the fp32 parameters, then `master_weights`: Megatron's 18 bytes a parameter
// without the distributed optimizer). element_bytes must then be 4 (the 16-bit prediction above
// already halves activations).
// optimizer_shards: the distributed optimizer (ZeRO-1, `[train] distributed_optimizer`) over that
// many dp ranks keeps optimizer state for one shard (parallel/optimizer_shards.h: about 1/dp, plus a
// tail of fewer than dp * 16 floats per segment that every rank keeps), and master weights too
// where they are not the weights themselves: the 16-bit prediction, and gemm_weights = BF16, where
// `weights` is the bf16 copy plus the fp32 tensors read outside GEMMs (norms, biases, the
// embedding: model/stage_weights.h) and `master_weights` the shard plus one bucket's gather buffer:
// 2 + 4 + 12/dp bytes a parameter and a little.
// sequence_parallel (needs tp > 1): the residual stream's activations (the norms' inputs and
// outputs, the residual adds, a stage's input) and the p2p messages are split by rows over the tp
// ranks, as GptStage lays them out; the final norm's output and the head's gradient stay whole.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/recompute.h"
#include "parallel/optimizer_shards.h"
#include "parallel/schedule.h"
#include "runtime/backend.h"

namespace pipelane {

struct MemorySpec {
  GptConfig model;
  ScheduleSpec schedule{ScheduleKind::OneFOneB, 1, 1, 1};
  int tp = 1;
  int micro_batch = 1;
  int seq_len = 1;
  std::string layers_per_stage;  // "" splits evenly (parallel/layer_split.h)
  RecomputeOptions recompute;
  int element_bytes = 4;      // 4: fp32 (what pipelane stores); 2: 16-bit storage, predicted only
  int optimizer_shards = 1;   // the distributed optimizer (ZeRO-1): dp; 1: replicated
  std::size_t optimizer_bucket_floats = kShardBucketFloats;  // its buckets
  bool sequence_parallel = false;  // [parallel] sequence_parallel: rows of the residual stream split over tp
  DType storage = DType::F32;      // [train] storage: BF16 keeps activations and messages in bf16
  DType gemm_weights = DType::F32; // [train] gemm_weights: BF16 adds a bf16 copy of the weights for the GEMMs
};

// Whether the spec's fp32 master weights are sharded over dp (optimizer_shards.h's rule).
inline bool masters_sharded(const MemorySpec& spec) {
  return masters_sharded(spec.gemm_weights, spec.optimizer_shards);
}

// One model chunk (virtual stage) of a rank.
struct ChunkMemory {
  int virtual_stage = 0;
  StageRange range;
  int in_flight = 1;                    // microbatches it holds at once under the schedule
  double parameters = 0;                // this rank's, in elements (aligned as the arena places them)
  double activation_bytes = 0;          // one microbatch's
  double scratch_bytes = 0;             // shared by its microbatches (recomputation's workspace included)
  double message_bytes = 0;             // one p2p buffer; a microbatch holds three
};

struct RankMemory {
  int stage = 0, tp_rank = 0;
  double weights = 0, master_weights = 0, gradients = 0, optimizer = 0;
  double scratch = 0, activations = 0, messages = 0;
  std::vector<ChunkMemory> chunks;
  double model_states() const { return weights + master_weights + gradients + optimizer; }
  double total() const { return model_states() + scratch + activations + messages; }
};

// One (pipeline stage, tensor-parallel rank). `sizing` answers the backend-specific sizes (the
// attention's saved state, the head's scratch); nothing is allocated or computed.
// std::invalid_argument (one line) for a spec the model cannot be split into.
RankMemory predict_rank_memory(const MemorySpec& spec, int stage, int tp_rank, Backend& sizing);
// Every stage's, tp rank 0's (the ranks of a tensor-parallel group hold the same sizes; data-
// parallel replicas are copies).
std::vector<RankMemory> predict_memory(const MemorySpec& spec, Backend& sizing);
// The backend whose rules size a prediction made away from the run's own backend (`pipelane
// memory`, the job simulator): the CPU backend's (its attention keeps the probabilities), in the
// compute precision the spec's run has - bf16 under bf16 storage, which needs it, and where the
// norms' outputs then go straight to bf16 as the run's do.
std::unique_ptr<Backend> make_sizing_backend(const MemorySpec& spec);

// The memory features `spec` uses, for messages and run headers: "recompute selective, distributed
// optimizer over dp 4, sequence parallel, bf16 storage (activations and messages), bf16 GEMM weights"; "" when none is.
std::string describe_memory_features(const MemorySpec& spec);

// One transformer layer's activations for one microbatch in pipelane's layout at the spec's
// storage (what a layer adds to a stage's activation_bytes; a full-recompute layer alone keeps
// its output), for comparison with the formula below.
double layer_activation_bytes(const MemorySpec& spec, Backend& sizing);

// Korthikanti et al. 2022's activations of one transformer layer for one microbatch, 16-bit:
// s*b*h*(34 + 5*a*s/h) bytes (none), 34*s*b*h (selective), 2*s*b*h (full: the layer's input),
// each divided by t = tp with sequence parallelism (sequence_parallel); tensor parallelism alone
// leaves 10*s*b*h of the 34 (and full's 2*s*b*h) unsplit.
double korthikanti_layer_activation_bytes(const MemorySpec& spec);

}  // namespace pipelane
