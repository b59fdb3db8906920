#include "trainer/run/model_gather.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "parallel/control_plane.h"
#include "trainer/checkpoint/staging.h"

namespace pipelane {

namespace {

// One rank's tensors: a JSON list of ParamEntry fields, a zero byte, then the floats in order.
// The parameters are training memory: they come out through the checkpoints' host staging.
std::string encode_slices(PipelineExecutor& exec, const CheckpointView& parameters) {
  const TrainingMemory memory = training_memory(exec, parameters);
  const StageTensorOut stage_out = stage_out_of(memory);
  nlohmann::json entries = nlohmann::json::array();
  std::string data;
  std::vector<float> staging;
  for (const ParamEntry* e : checkpoint_tensors(memory.chunks)) {  // the tied wte once
    entries.push_back({{"name", e->name}, {"shape", e->shape}, {"full_shape", e->full_shape},
                       {"shard_dim", e->shard_dim}, {"shard_blocks", e->shard_blocks},
                       {"tp_rank", e->tp_rank}, {"tp_size", e->tp_size}});
    staging.resize(e->numel);
    stage_out(TensorGroup::Params, *e, staging.data());
    memory.stream.synchronize();
    data.append(reinterpret_cast<const char*>(staging.data()), e->numel * sizeof(float));
  }
  return entries.dump() + std::string(1, '\0') + data;
}

struct Slice {
  ParamEntry entry;
  std::vector<float> data;
};

}  // namespace

std::optional<LoadedModel> gather_model_on_rank0(PipelineExecutor& exec, Topology& topo, const GptConfig& cfg) {
  // Collective over dp when the masters are sharded: every dp rank takes part in the gather.
  const CheckpointView parameters = exec.parameters_view();
  const std::string mine = topo.me.dp == 0 ? encode_slices(exec, parameters) : std::string();
  const std::vector<std::string> all = gather_to_root(*topo.world, mine);
  if (topo.world_rank != 0) return std::nullopt;
  std::map<std::string, std::map<int, Slice>> by_name;  // name -> tp rank -> slice
  for (const std::string& blob : all) {
    if (blob.empty()) continue;
    const std::size_t zero = blob.find('\0');
    const nlohmann::json entries = nlohmann::json::parse(blob.substr(0, zero));
    std::size_t at = zero + 1;
    for (const auto& j : entries) {
      Slice s;
      s.entry.name = j["name"].get<std::string>();
      s.entry.shape = j["shape"].get<std::vector<std::int64_t>>();
      s.entry.full_shape = j["full_shape"].get<std::vector<std::int64_t>>();
      s.entry.shard_dim = j["shard_dim"].get<int>();
      s.entry.shard_blocks = j["shard_blocks"].get<int>();
      s.entry.tp_rank = j["tp_rank"].get<int>();
      s.entry.tp_size = j["tp_size"].get<int>();
      s.entry.numel = 1;
      for (std::int64_t d : s.entry.shape) s.entry.numel *= static_cast<std::size_t>(d);
      s.data.resize(s.entry.numel);
      std::memcpy(s.data.data(), blob.data() + at, s.entry.numel * sizeof(float));
      at += s.entry.numel * sizeof(float);
      by_name[s.entry.name].emplace(s.entry.tp_rank, std::move(s));  // first copy wins (tied wte)
    }
  }
  LoadedModel m;
  m.config = cfg;
  m.layout = std::make_unique<ParamLayout>(cfg, StageRange::whole(cfg));
  m.params.assign(m.layout->total_floats(), 0.f);
  for (const ParamEntry& e : m.layout->entries()) {
    const auto it = by_name.find(e.name);
    if (it == by_name.end()) throw std::runtime_error("gathering the model: no rank holds " + e.name);
    std::vector<const ParamEntry*> entries;
    std::vector<const float*> shards;
    for (const auto& [tp, s] : it->second) {
      entries.push_back(&s.entry);
      shards.push_back(s.data.data());
    }
    std::vector<float> full(entries.front()->full_numel());
    gather_full_tensor(entries, shards, full.data());
    // wte may be padded for the tp degree (padded_vocab_for_tp); the whole model keeps the rows it has.
    std::copy(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(std::min(full.size(), e.numel)),
              m.params.begin() + static_cast<std::ptrdiff_t>(e.offset));
  }
  return m;
}

}  // namespace pipelane
