#include "parallel/optimizer_shards.h"

#include <set>
#include <stdexcept>
#include <string>

namespace pipelane {

ShardPlan plan_shards(std::size_t total, const std::vector<std::size_t>& cuts, int ranks,
                      std::size_t bucket_floats) {
  if (ranks < 1) throw std::invalid_argument("plan_shards: " + std::to_string(ranks) + " ranks");
  const std::size_t r = static_cast<std::size_t>(ranks);
  const std::size_t quantum = r * kShardAlignFloats;
  const std::size_t full_piece = (bucket_floats + quantum - 1) / quantum * kShardAlignFloats;
  ShardPlan plan;
  plan.ranks = ranks;
  std::vector<std::size_t> bounds{0};
  for (std::size_t c : cuts) {
    if (c <= bounds.back() || c >= total)
      throw std::invalid_argument("plan_shards: cut " + std::to_string(c) + " out of order or outside (0, " +
                                  std::to_string(total) + ")");
    bounds.push_back(c);
  }
  bounds.push_back(total);
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    std::size_t at = bounds[s];
    const std::size_t end = bounds[s + 1];
    while (end - at >= quantum) {
      const std::size_t left = end - at;
      const std::size_t piece = left >= r * full_piece ? full_piece : left / quantum * kShardAlignFloats;
      plan.buckets.push_back({at, piece, plan.shard_floats});
      plan.shard_floats += piece;
      at += r * piece;
    }
    if (at < end) {
      plan.tails.push_back({at, end - at, plan.shard_floats});
      plan.shard_floats += end - at;
    }
  }
  return plan;
}

ShardPlan plan_chunk_shards(const ParamLayout& layout, int ranks, std::size_t bucket_floats,
                            const Fp32Reads* fp32_reads) {
  std::set<std::size_t> cuts;
  if (const ParamEntry* wte = layout.tied_embedding()) cuts.insert({wte->offset, wte->offset + wte->numel});
  if (fp32_reads)
    for (const Fp32Reads::Tensor& t : fp32_reads->tensors) cuts.insert({t.flat, t.flat + t.numel});
  cuts.erase(0);
  cuts.erase(layout.total_floats());
  return plan_shards(layout.total_floats(), std::vector<std::size_t>(cuts.begin(), cuts.end()), ranks, bucket_floats);
}

}  // namespace pipelane
