// The one place where checkpoints touch training memory (the ChunkState buffers of the executor):
// a save copies each tensor into a host staging buffer, a load copies a host staging buffer into
// place. When training state lives in device memory these two copies become the backend's
// device-to-host and host-to-device copies; nothing else in the checkpoint code needs to change.
#pragma once
#include <string>
#include <vector>

#include "parallel/pipeline_executor.h"
#include "trainer/checkpoint_reader.h"
#include "trainer/checkpoint_shard_file.h"

namespace pipelane {

// The tensors of this rank's chunks, each name once (the tied wte held by two chunks is stored once).
std::vector<const ParamEntry*> checkpoint_tensors(const std::vector<ChunkState>& chunks);
// Copies a tensor of `chunks` into a staging buffer, for write_shard.
StageTensorOut stage_out_of(const std::vector<ChunkState>& chunks);

// write_shard of every tensor of `chunks`.
ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank, const std::vector<ChunkState>& chunks,
                        const TrainingProgress& progress);
// Fills every chunk's parameters and both AdamW moments from `reader`, sliced for its layout.
void load_chunk_states(CheckpointReader& reader, const std::vector<ChunkState>& chunks);

}  // namespace pipelane
