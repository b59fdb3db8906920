#include "trainer/checkpoint_staging.h"

#include <algorithm>
#include <map>
#include <set>

namespace pipelane {

namespace {

float* buffer_of(const ChunkState& c, TensorGroup g) {
  switch (g) {
    case TensorGroup::Params: return c.params;
    case TensorGroup::AdamM: return c.adam_m;
    case TensorGroup::AdamV: return c.adam_v;
  }
  return nullptr;
}

}  // namespace

std::vector<const ParamEntry*> checkpoint_tensors(const std::vector<ChunkState>& chunks) {
  std::vector<const ParamEntry*> out;
  std::set<std::string> seen;
  for (const ChunkState& c : chunks)
    for (const ParamEntry& e : c.layout->entries())
      if (seen.insert(e.name).second) out.push_back(&e);
  return out;
}

StageTensorOut stage_out_of(const std::vector<ChunkState>& chunks) {
  std::map<std::string, ChunkState> holder;  // the first chunk holding each name
  for (const ChunkState& c : chunks)
    for (const ParamEntry& e : c.layout->entries()) holder.emplace(e.name, c);
  return [holder = std::move(holder)](TensorGroup g, const ParamEntry& e, float* staging) {
    const float* src = buffer_of(holder.at(e.name), g) + e.offset;
    std::copy(src, src + e.numel, staging);
  };
}

ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank, const std::vector<ChunkState>& chunks,
                        const TrainingProgress& progress) {
  return write_shard(dir, pp_rank, tp_rank, checkpoint_tensors(chunks), stage_out_of(chunks), progress);
}

void load_chunk_states(CheckpointReader& reader, const std::vector<ChunkState>& chunks) {
  const std::vector<TensorGroup> all(std::begin(kTensorGroups), std::end(kTensorGroups));
  for (const ChunkState& c : chunks)
    reader.load_into(*c.layout, all, [&c](TensorGroup g, const ParamEntry& e, const float* staging) {
      std::copy(staging, staging + e.numel, buffer_of(c, g) + e.offset);
    });
}

}  // namespace pipelane
