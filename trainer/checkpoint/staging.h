// The one place where checkpoints touch training memory (the ChunkState buffers of the executor,
// memory of its Backend, possibly on a device): a save copies each tensor into a host staging
// buffer with the backend's copy, a load copies a host staging buffer into place the same way,
// both ordered on the stream the buffers are used on (PipelineExecutor::compute_stream()).
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <string>
#include <vector>

#include "parallel/pipeline_executor.h"
#include "runtime/backend.h"
#include "trainer/checkpoint/reader.h"
#include "trainer/checkpoint/shard_file.h"

namespace pipelane {

// Where a rank's training state lives and how to reach it.
struct TrainingMemory {
  std::vector<ChunkState> chunks;
  Backend& backend;
  Stream& stream;
};
// The state of a view of the executor (PipelineExecutor::checkpoint_view or parameters_view: under
// the distributed optimizer the training buffers lack the moments, and with sharded masters the
// parameters too), which must outlive the result.
TrainingMemory training_memory(PipelineExecutor& exec, const CheckpointView& state);

// The tensors of this rank's chunks, each name once (the tied wte held by two chunks is stored once).
std::vector<const ParamEntry*> checkpoint_tensors(const std::vector<ChunkState>& chunks);
// Copies a tensor of `memory` into a host staging buffer, for write_shard.
StageTensorOut stage_out_of(const TrainingMemory& memory);

// write_shard of every tensor of `memory`.
ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank, const TrainingMemory& memory,
                        const TrainingProgress& progress);
// Fills every chunk's parameters and both AdamW moments from `reader`, sliced for its layout.
void load_training_memory(CheckpointReader& reader, const TrainingMemory& memory);
// The same into an executor; under the distributed optimizer each rank reads the full moments and
// keeps its shard (any dp resumes any checkpoint: they are stored in the replicated layout).
void load_training_memory(CheckpointReader& reader, PipelineExecutor& exec);

}  // namespace pipelane
