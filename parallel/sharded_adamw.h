// The distributed optimizer (ZeRO-1) of one model chunk: AdamW whose moments each data-parallel
// rank keeps only for its shard of the flat buffer (parallel/optimizer_shards.h). The gradients are
// reduce-scattered (a tail all-reduced), each rank updates the parameters it owns from its reduced
// gradients and moments, and the updated parameters are all-gathered. In fp32 the parameters
// themselves are the masters and stay whole on every rank: forward and backward read them. With
// bf16 GEMM weights the masters are sharded too (PassWeights): this object keeps the fp32 masters
// of its spans beside the moments and makes from them the weights the passes read
// (model/stage_weights.h): the bf16 copy, and the packed fp32 tensors read outside GEMMs. After
// each update a bucket that holds no such tensor is rounded to bf16 by its owner and all-gathered
// in bf16 (Megatron-LM's parameter gather: half the bytes of fp32), into the bf16 copy in place,
// in the background until the passes next read the weights; a bucket that holds one is gathered in
// fp32 through one small buffer (a slice of each rank's piece at a time), so its packed tensors get
// their fp32 values, and rounded from those. Either way the weights are bit for bit those that
// whole fp32 masters would give.
//
// Bits: AdamW is element-wise, so an owned element takes the replicated optimizer's update exactly
// when its reduced gradient and the clip scale are the same bits. A reduce-scatter's sum of two
// ranks is the all-reduce's (a + b == b + a); the thread planes sum every collective in rank order,
// so there any dp gives the same gradient bits. The global norm is summed from the shards, in
// another order than the replicated optimizer's: see grad_sum_squares_for_global_norm.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "model/adamw.h"
#include "model/stage_weights.h"
#include "parallel/data_plane.h"
#include "parallel/optimizer_shards.h"
#include "runtime/arena.h"
#include "runtime/backend.h"

namespace pipelane {

// The masters' gather buffer: a bucket's pieces are gathered a quarter of the longest piece of each
// at a time, and at most kMasterGatherFloats in all (1 MiB), so the buffer is small beside any
// model whose masters are worth sharding and its messages stay large enough for the wire.
inline constexpr std::size_t kMasterGatherFloats = std::size_t{1} << 18;

class ShardedAdamW {
 public:
  // A stretch of the flat buffer whose reduced gradient this rank holds after the reduce.
  struct Span {
    std::size_t flat = 0, length = 0;
    std::size_t grad_at = 0;   // where its reduced gradient is in the gradient buffer
    std::size_t shard_at = 0;  // where its moments are in the shard
    bool tail = false;         // every dp rank holds it (all-reduced), not only this one
  };

  // Sharded masters: where the weights the passes read live, in the layout of `reads` (the caller's,
  // alive as long as this object).
  struct PassWeights {
    std::uint16_t* bf16 = nullptr;  // the bf16 copy, layout.total_floats() long
    float* packed = nullptr;        // the fp32 tensors read outside GEMMs, reads->floats long
    const Fp32Reads* reads = nullptr;
  };

  // The moments (plan.shard_floats each, zeroed) are carved from `arena` on `stream`, and with
  // `pass_weights` the masters (as many, filled by keep_own_parameters) and the gather buffer
  // (gather_floats). `layout` and `dp` must outlive this object.
  ShardedAdamW(const ParamLayout& layout, DataPlane& dp, std::size_t bucket_floats, Arena& arena, Backend& backend,
               Stream& stream, const PassWeights* pass_weights = nullptr);

  const ShardPlan& plan() const { return plan_; }
  float* m() const { return m_; }
  float* v() const { return v_; }
  // Sharded masters only (else null): the fp32 masters of this rank's spans, at their shard_at, and
  // the gather buffer, gather_floats(plan()) long.
  float* masters() const { return masters_; }
  float* gather_buffer() const { return gather_; }
  // Each rank's share of one gather: a quarter of the longest piece (rounded up to kShardAlignFloats),
  // at most kMasterGatherFloats / dp, at least kShardAlignFloats.
  static std::size_t gather_slice_floats(const ShardPlan& plan);
  // The gather buffer's floats, dp slices (also what the memory model counts).
  static std::size_t gather_floats(const ShardPlan& plan);

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

  // Sharded masters: AdamW on this rank's masters, then the weights the passes read made from them:
  // the bf16 buckets' all-gathers start on `stream` (completions to `pending`: wait for them before
  // the passes read the weights), the other buckets and the tails are done when it returns.
  void step_masters(const float* grads, const AdamWConfig& cfg, float lr, int t, float grad_scale, Backend& backend,
                    Stream& stream, std::vector<std::unique_ptr<Event>>& pending);
  // Sharded masters: this rank's masters, and the weights the passes read, from full-layout fp32
  // parameters (host or backend memory: the initial ones, a checkpoint's), a gather buffer's
  // length at a time through that buffer. No communication; ordered on `stream`.
  void keep_own_parameters(const float* full, Backend& backend, Stream& stream);
  // Per bucket of `plan`: gathered in bf16 (it holds no tensor of `reads` and starts at an even
  // element: its bf16 pairs travel as floats through the data plane, which copies bytes), or fp32.
  static std::vector<bool> buckets_gathered_in_bf16(const ShardPlan& plan, const Fp32Reads& reads);

  // Checkpoints keep the replicated optimizer's layout, so any dp resumes from them. Collective
  // over dp: every rank's moments assembled into full-layout m and v (layout.total_floats() each,
  // host or backend memory), gathered slice by slice through `buffer` (backend memory,
  // gather_floats(plan()) long: gather_buffer() or the caller's), so the device needs no more.
  void gather_moments(float* full_m, float* full_v, float* buffer, Backend& backend, Stream& stream);
  // Sharded masters: the same for the masters, into full-layout fp32 parameters.
  void gather_masters(float* full, float* buffer, Backend& backend, Stream& stream);
  // No communication: this rank's shard taken from full-layout moments (a checkpoint's).
  void keep_own_moments(const float* full_m, const float* full_v, Backend& backend, Stream& stream);

 private:
  // An owned span cut at tensor boundaries: one adamw_update call, one sum of squares.
  struct Piece {
    const ParamEntry* entry;
    Span span;  // inside the entry
  };
  // `n` values of the flat buffer from `flat`, in backend memory ordered on the stream.
  using Slice = std::function<void(const float* values, std::size_t flat, std::size_t n)>;
  // Every dp rank's `shard` (laid out as the moments) of the buckets where `bucket(i)`, a slice of
  // each rank's piece at a time through `buffer`, then the tails, handed to `each` by flat offset.
  void gather_slices(const float* shard, float* buffer, Stream& stream, const std::function<bool(std::size_t)>& bucket,
                     const Slice& each);
  // Sharded masters: the bf16 copy and the packed fp32 tensors made from `n` fp32 values from `flat`.
  void publish(const float* values, std::size_t flat, std::size_t n, Backend& backend, Stream& stream);
  void gather_shard(const float* shard, float* full, float* buffer, Backend& backend, Stream& stream);
  const ParamLayout& layout_;
  DataPlane& dp_;
  ShardPlan plan_;
  std::vector<Span> owned_;    // by flat offset
  std::vector<Piece> pieces_;  // owned_ cut at the layout's entries
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* masters_ = nullptr;  // sharded masters only, with the gather buffer
  float* gather_ = nullptr;
  PassWeights pass_;
  std::vector<bool> bf16_gather_;  // per bucket: gathered in bf16 (it holds no packed fp32 tensor)
};

}  // namespace pipelane
