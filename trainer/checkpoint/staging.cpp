#include "trainer/checkpoint/staging.h"

#include <map>
#include <set>
#include <stdexcept>

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

TrainingMemory training_memory(PipelineExecutor& exec, const CheckpointView& state) {
  return {state.chunks, exec.backend(), exec.compute_stream()};
}

std::vector<const ParamEntry*> checkpoint_tensors(const std::vector<ChunkState>& chunks) {
  std::vector<const ParamEntry*> out;
  std::set<std::string> seen;
  for (const ChunkState& c : chunks)
    for (const ParamEntry& e : c.layout->entries())
      if (seen.insert(e.name).second) out.push_back(&e);
  return out;
}

StageTensorOut stage_out_of(const TrainingMemory& memory) {
  std::map<std::string, ChunkState> holder;  // the first chunk holding each name
  for (const ChunkState& c : memory.chunks)
    for (const ParamEntry& e : c.layout->entries()) holder.emplace(e.name, c);
  return [holder = std::move(holder), &backend = memory.backend, &stream = memory.stream](
             TensorGroup g, const ParamEntry& e, float* staging) {
    backend.copy(staging, buffer_of(holder.at(e.name), g) + e.offset, e.numel * sizeof(float), stream);
    stream.synchronize();  // the host buffer is read right after
  };
}

ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank, const TrainingMemory& memory,
                        const TrainingProgress& progress) {
  return write_shard(dir, pp_rank, tp_rank, checkpoint_tensors(memory.chunks), stage_out_of(memory), progress);
}

void load_training_memory(CheckpointReader& reader, const TrainingMemory& memory) {
  const std::vector<TensorGroup> all(std::begin(kTensorGroups), std::end(kTensorGroups));
  for (const ChunkState& c : memory.chunks)
    if (!c.adam_m || !c.adam_v)
      throw std::logic_error("load_training_memory: the distributed optimizer's moments are sharded; load through "
                             "PipelineExecutor::checkpoint_view");
  for (const ChunkState& c : memory.chunks)
    reader.load_into(*c.layout, all, [&](TensorGroup g, const ParamEntry& e, const float* staging) {
      memory.backend.copy(buffer_of(c, g) + e.offset, staging, e.numel * sizeof(float), memory.stream);
      memory.stream.synchronize();  // the staging buffer is reused for the next tensor
    });
}

void load_training_memory(CheckpointReader& reader, PipelineExecutor& exec) {
  const CheckpointView state = exec.checkpoint_view(/*gather=*/false);
  load_training_memory(reader, training_memory(exec, state));
  exec.keep_loaded_state(state);
}

}  // namespace pipelane
