// How the distributed optimizer (ZeRO-1, `[train] distributed_optimizer`) cuts one model chunk's
// flat parameter buffer over its data-parallel group. Pure arithmetic on the layout: the executor
// shards with it and the memory model predicts with it, so the two cannot disagree.
//
// The buffer is cut into segments (a tied embedding, summed between the first and last pipeline
// stage, is a segment of its own, so both stages cut it alike), each segment into buckets of
// `dp * piece` floats and a tail shorter than dp * kShardAlignFloats. A bucket is reduce-scattered:
// dp rank r owns piece r of it ([start + r*piece, start + (r+1)*piece)), keeps AdamW moments for
// that piece only, updates it and all-gathers it back. A tail is all-reduced and every dp rank
// keeps its moments and updates it, as the replicated optimizer does (a few floats per segment:
// reduce-scatters need equal blocks).
#pragma once
#include <cstddef>
#include <vector>

#include "model/gpt_layout.h"
#include "model/stage_weights.h"

namespace pipelane {

// Pieces are multiples of this many floats (64 bytes), so every piece starts as aligned as its
// bucket.
inline constexpr std::size_t kShardAlignFloats = 16;
// A bucket's whole size aims at the replicated optimizer's all-reduce buckets (4 MiB).
inline constexpr std::size_t kShardBucketFloats = std::size_t{1} << 20;

// Whether the fp32 master weights are sharded over dp too: bf16 GEMM weights under the distributed
// optimizer (the executor's layout then: model/stage_weights.h, parallel/sharded_adamw.h). The one
// rule the memory model, the executor and the job simulator ask.
inline bool masters_sharded(DType gemm_weights, int optimizer_shards) {
  return gemm_weights == DType::BF16 && optimizer_shards > 1;
}

struct ShardBucket {
  std::size_t start = 0;         // in the flat buffer
  std::size_t piece = 0;         // floats each dp rank owns; the bucket is ranks * piece long
  std::size_t shard_offset = 0;  // where the owned piece's moments sit in the rank's shard
};

struct ShardTail {
  std::size_t start = 0, length = 0;
  std::size_t shard_offset = 0;  // its moments, kept whole by every rank
};

struct ShardPlan {
  int ranks = 1;  // the dp group's size
  std::vector<ShardBucket> buckets;
  std::vector<ShardTail> tails;
  std::size_t shard_floats = 0;  // one rank's moments (each of m and v): pieces and tails
};

// Buckets of `bucket_floats` (rounded to ranks * kShardAlignFloats) over [0, total), restarting at
// every cut (sorted offsets inside (0, total)).
ShardPlan plan_shards(std::size_t total, const std::vector<std::size_t>& cuts, int ranks,
                      std::size_t bucket_floats = kShardBucketFloats);

// The plan of a chunk with `layout` over `ranks` dp ranks: the tied embedding (when the layout holds
// one) cut out as its own segment. With `fp32_reads` (sharded masters: model/stage_weights.h) every
// run of tensors read outside GEMMs is a segment of its own too, so no bucket mixes them with GEMM
// weights and every bucket of GEMM weights can be all-gathered in bf16 (parallel/sharded_adamw.h).
ShardPlan plan_chunk_shards(const ParamLayout& layout, int ranks, std::size_t bucket_floats = kShardBucketFloats,
                            const Fp32Reads* fp32_reads = nullptr);

}  // namespace pipelane
