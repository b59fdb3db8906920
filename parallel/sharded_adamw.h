// The distributed optimizer (ZeRO-1) of one model chunk: AdamW whose moments each data-parallel
// rank keeps only for its shard of the flat buffer (parallel/optimizer_shards.h). The gradients are
// reduce-scattered (a tail all-reduced), each rank updates the parameters it owns from its reduced
// gradients and moments, and the updated parameters are all-gathered. The parameters themselves
// are the fp32 masters and stay whole on every rank: forward and backward need them.
//
// Bits: AdamW is element-wise, so an owned element takes the replicated optimizer's update exactly
// when its reduced gradient and the clip scale are the same bits. A reduce-scatter's sum of two
// ranks is the all-reduce's (a + b == b + a); the thread planes sum every collective in rank order,
// so there any dp gives the same gradient bits. The global norm is summed from the shards, in
// another order than the replicated optimizer's: see grad_sum_squares_for_global_norm.
#pragma once
#include <memory>
#include <vector>

#include "model/adamw.h"
#include "parallel/data_plane.h"
#include "parallel/optimizer_shards.h"
#include "runtime/arena.h"
#include "runtime/backend.h"

namespace pipelane {

class ShardedAdamW {
 public:
  // A stretch of the flat buffer whose reduced gradient this rank holds after the reduce.
  struct Span {
    std::size_t flat = 0, length = 0;
    std::size_t grad_at = 0;   // where its reduced gradient is in the gradient buffer
    std::size_t shard_at = 0;  // where its moments are in the shard
    bool tail = false;         // every dp rank holds it (all-reduced), not only this one
  };

  // The moments (plan.shard_floats each, zeroed) are carved from `arena` on `stream`. `layout` and
  // `dp` must outlive this object.
  ShardedAdamW(const ParamLayout& layout, DataPlane& dp, std::size_t bucket_floats, Arena& arena, Backend& backend,
               Stream& stream);

  const ShardPlan& plan() const { return plan_; }
  float* m() const { return m_; }
  float* v() const { return v_; }

  // Starts the reduce of `grads` over dp on `stream` (what produced them must be ordered before):
  // a reduce-scatter per bucket, an all-reduce per tail; their completions go to `pending`.
  void start_gradient_reduce(float* grads, Stream& stream, std::vector<std::unique_ptr<Event>>& pending);
  // After the reduce: this rank's spans inside [begin, end) of the flat buffer, in order. Spans
  // never straddle a cut, so a tied embedding's spans are alike on both stages that hold it.
  std::vector<Span> spans(std::size_t begin, std::size_t end) const;

  // This rank's share of the squared global norm: its spans of the tensors the replicated
  // optimizer counts (grad_sum_squares_for_global_norm: tp-sharded ones, replicated ones on tp
  // rank 0), tails on dp rank 0 only, never `skip` (the head's copy of a tied embedding). Summed
  // over the world it is the model's squared norm, without dividing by dp. The order of the double
  // additions differs from the replicated optimizer's, so the two agree to a relative 2 * gamma_K
  // (K: the additions on the longest path, fewer than the model's elements times dp plus the
  // world's ranks; gamma_K = K u / (1 - K u), u = 2^-53), not bit for bit.
  double grad_sum_squares_for_global_norm(const float* grads, const ParamEntry* skip, Backend& backend,
                                          Stream& stream) const;

  // AdamW on this rank's spans (weight decay per tensor, as adamw_step), then the all-gather of the
  // updated pieces starts on `stream`; its completions go to `pending`.
  void step(float* params, const float* grads, const AdamWConfig& cfg, float lr, int t, float grad_scale,
            Backend& backend, Stream& stream, std::vector<std::unique_ptr<Event>>& pending);

  // Checkpoints keep the replicated optimizer's layout, so any dp resumes from them. Collective
  // over dp: every rank's moments assembled into full-layout m and v (layout.total_floats() each).
  void gather_moments(float* full_m, float* full_v, Backend& backend, Stream& stream);
  // No communication: this rank's shard taken from full-layout moments (a checkpoint's).
  void keep_own_moments(const float* full_m, const float* full_v, Backend& backend, Stream& stream);

 private:
  // An owned span cut at tensor boundaries: one adamw_update call, one sum of squares.
  struct Piece {
    const ParamEntry* entry;
    Span span;  // inside the entry
  };
  const ParamLayout& layout_;
  DataPlane& dp_;
  ShardPlan plan_;
  std::vector<Span> owned_;    // by flat offset
  std::vector<Piece> pieces_;  // owned_ cut at the layout's entries
  float* m_ = nullptr;
  float* v_ = nullptr;
};

}  // namespace pipelane
