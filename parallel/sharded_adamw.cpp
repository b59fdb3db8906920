#include "parallel/sharded_adamw.h"

#include <algorithm>
#include <stdexcept>

namespace pipelane {

ShardedAdamW::ShardedAdamW(const ParamLayout& layout, DataPlane& dp, std::size_t bucket_floats, Arena& arena,
                           Backend& backend, Stream& stream, const PassWeights* pass_weights)
    : layout_(layout),
      dp_(dp),
      plan_(plan_chunk_shards(layout, dp.size(), bucket_floats, pass_weights ? pass_weights->reads : nullptr)) {
  const std::size_t r = static_cast<std::size_t>(dp.rank());
  for (const ShardBucket& b : plan_.buckets)
    owned_.push_back({b.start + r * b.piece, b.piece, b.start, b.shard_offset, false});
  for (const ShardTail& t : plan_.tails) owned_.push_back({t.start, t.length, t.start, t.shard_offset, true});
  std::sort(owned_.begin(), owned_.end(), [](const Span& a, const Span& b) { return a.flat < b.flat; });
  for (const ParamEntry& e : layout.entries())
    for (const Span& s : spans(e.offset, e.offset + e.numel)) pieces_.push_back({&e, s});
  m_ = arena.allocate_n<float>(plan_.shard_floats, "adamw.m");
  v_ = arena.allocate_n<float>(plan_.shard_floats, "adamw.v");
  backend.memset_zero(m_, plan_.shard_floats * sizeof(float), stream);
  backend.memset_zero(v_, plan_.shard_floats * sizeof(float), stream);
  if (pass_weights) {
    pass_ = *pass_weights;
    masters_ = arena.allocate_n<float>(plan_.shard_floats, "master_weights");
    gather_ = arena.allocate_n<float>(gather_floats(plan_), "master_weights.gather");
    bf16_gather_ = buckets_gathered_in_bf16(plan_, *pass_.reads);
  }
}

std::vector<bool> ShardedAdamW::buckets_gathered_in_bf16(const ShardPlan& plan, const Fp32Reads& reads) {
  std::vector<bool> out;
  for (const ShardBucket& b : plan.buckets) {
    const std::size_t end = b.start + b.piece * static_cast<std::size_t>(plan.ranks);
    bool bf16 = b.start % 2 == 0 && b.piece % 2 == 0;
    for (const Fp32Reads::Tensor& t : reads.tensors)
      if (t.flat < end && b.start < t.flat + t.numel) bf16 = false;
    out.push_back(bf16);
  }
  return out;
}

std::size_t ShardedAdamW::gather_slice_floats(const ShardPlan& plan) {
  constexpr std::size_t A = kShardAlignFloats;
  std::size_t longest = 1;
  for (const ShardBucket& b : plan.buckets) longest = std::max(longest, b.piece);
  const std::size_t quarter = ((longest + 3) / 4 + A - 1) / A * A;
  const std::size_t cap = kMasterGatherFloats / static_cast<std::size_t>(plan.ranks) / A * A;
  return std::max(A, std::min(quarter, cap));
}

std::size_t ShardedAdamW::gather_floats(const ShardPlan& plan) {
  return gather_slice_floats(plan) * static_cast<std::size_t>(plan.ranks);
}

void ShardedAdamW::start_gradient_reduce(float* grads, Stream& stream, std::vector<std::unique_ptr<Event>>& pending) {
  for (const ShardBucket& b : plan_.buckets) pending.push_back(dp_.reduce_scatter_sum_async(grads + b.start, b.piece, stream));
  for (const ShardTail& t : plan_.tails) pending.push_back(dp_.all_reduce_sum_async(grads + t.start, t.length, stream));
}

std::vector<ShardedAdamW::Span> ShardedAdamW::spans(std::size_t begin, std::size_t end) const {
  std::vector<Span> out;
  for (const Span& s : owned_) {
    const std::size_t lo = std::max(begin, s.flat), hi = std::min(end, s.flat + s.length);
    if (lo >= hi) continue;
    const std::size_t skip = lo - s.flat;
    out.push_back({lo, hi - lo, s.grad_at + skip, s.shard_at + skip, s.tail});
  }
  return out;
}

double ShardedAdamW::grad_sum_squares_for_global_norm(const float* grads, const ParamEntry* skip, Backend& backend,
                                                      Stream& stream) const {
  const bool tp_rank0 = layout_.tp().rank == 0, dp_rank0 = dp_.rank() == 0;
  std::vector<const float*> slices;
  std::vector<std::size_t> sizes;
  for (const Piece& p : pieces_) {
    if (p.entry == skip || !(p.entry->sharded() || tp_rank0) || (p.span.tail && !dp_rank0)) continue;
    slices.push_back(grads + p.span.grad_at);
    sizes.push_back(p.span.length);
  }
  std::vector<double> sums(slices.size());
  backend.sum_squares_each(sums.data(), slices.data(), sizes.data(), slices.size(), stream);
  double total = 0.0;
  for (double s : sums) total += s;
  return total;
}

void ShardedAdamW::step(float* params, const float* grads, const AdamWConfig& cfg, float lr, int t, float grad_scale,
                        Backend& backend, Stream& stream, std::vector<std::unique_ptr<Event>>& pending) {
  for (const Piece& p : pieces_) {
    const AdamWParams h{lr, cfg.beta1, cfg.beta2, cfg.eps, p.entry->decay ? cfg.weight_decay : 0.f, t};
    backend.adamw_update(params + p.span.flat, grads + p.span.grad_at, m_ + p.span.shard_at, v_ + p.span.shard_at,
                         p.span.length, h, grad_scale, stream);
  }
  for (const ShardBucket& b : plan_.buckets) pending.push_back(dp_.all_gather_in_place_async(params + b.start, b.piece, stream));
}

void ShardedAdamW::step_masters(const float* grads, const AdamWConfig& cfg, float lr, int t, float grad_scale,
                                Backend& backend, Stream& stream, std::vector<std::unique_ptr<Event>>& pending) {
  if (!masters_) throw std::logic_error("ShardedAdamW::step_masters: made without pass weights");
  for (const Piece& p : pieces_) {
    const AdamWParams h{lr, cfg.beta1, cfg.beta2, cfg.eps, p.entry->decay ? cfg.weight_decay : 0.f, t};
    backend.adamw_update(masters_ + p.span.shard_at, grads + p.span.grad_at, m_ + p.span.shard_at,
                         v_ + p.span.shard_at, p.span.length, h, grad_scale, stream);
  }
  const std::size_t r = static_cast<std::size_t>(dp_.rank());
  for (std::size_t i = 0; i < plan_.buckets.size(); ++i) {
    if (!bf16_gather_[i]) continue;
    const ShardBucket& b = plan_.buckets[i];
    std::uint16_t* bucket = pass_.bf16 + b.start;
    backend.cast_to_bf16(bucket + r * b.piece, masters_ + b.shard_offset, b.piece, stream);
    pending.push_back(dp_.all_gather_in_place_async(reinterpret_cast<float*>(bucket), b.piece / 2, stream));
  }
  gather_slices(masters_, gather_, stream, [this](std::size_t i) { return !bf16_gather_[i]; },
                [&](const float* values, std::size_t flat, std::size_t n) { publish(values, flat, n, backend, stream); });
}

void ShardedAdamW::publish(const float* values, std::size_t flat, std::size_t n, Backend& backend, Stream& stream) {
  backend.cast_to_bf16(pass_.bf16 + flat, values, n, stream);
  for (const Fp32Reads::Tensor& t : pass_.reads->tensors) {
    const std::size_t lo = std::max(flat, t.flat), hi = std::min(flat + n, t.flat + t.numel);
    if (lo < hi)
      backend.copy(pass_.packed + t.packed + (lo - t.flat), values + (lo - flat), (hi - lo) * sizeof(float), stream);
  }
}

void ShardedAdamW::keep_own_parameters(const float* full, Backend& backend, Stream& stream) {
  if (!masters_) throw std::logic_error("ShardedAdamW::keep_own_parameters: made without pass weights");
  const std::size_t step = gather_floats(plan_), n = layout_.total_floats();
  for (std::size_t off = 0; off < n; off += step) {
    const std::size_t len = std::min(step, n - off);
    backend.copy(gather_, full + off, len * sizeof(float), stream);
    for (const Span& s : spans(off, off + len))
      backend.copy(masters_ + s.shard_at, gather_ + (s.flat - off), s.length * sizeof(float), stream);
    publish(gather_, off, len, backend, stream);
  }
}

void ShardedAdamW::gather_slices(const float* shard, float* buffer, Stream& stream,
                                 const std::function<bool(std::size_t)>& bucket, const Slice& each) {
  const std::size_t slice = gather_slice_floats(plan_);
  for (std::size_t i = 0; i < plan_.buckets.size(); ++i) {
    if (!bucket(i)) continue;
    const ShardBucket& b = plan_.buckets[i];
    for (std::size_t at = 0; at < b.piece; at += slice) {
      const std::size_t n = std::min(slice, b.piece - at);
      dp_.all_gather(shard + b.shard_offset + at, buffer, n, stream);
      for (int r = 0; r < plan_.ranks; ++r)
        each(buffer + static_cast<std::size_t>(r) * n, b.start + static_cast<std::size_t>(r) * b.piece + at, n);
    }
  }
  for (const ShardTail& tail : plan_.tails) each(shard + tail.shard_offset, tail.start, tail.length);
}

void ShardedAdamW::gather_shard(const float* shard, float* full, float* buffer, Backend& backend, Stream& stream) {
  gather_slices(shard, buffer, stream, [](std::size_t) { return true; },
                [&](const float* values, std::size_t flat, std::size_t n) {
                  backend.copy(full + flat, values, n * sizeof(float), stream);
                });
}

void ShardedAdamW::gather_moments(float* full_m, float* full_v, float* buffer, Backend& backend, Stream& stream) {
  gather_shard(m_, full_m, buffer, backend, stream);
  gather_shard(v_, full_v, buffer, backend, stream);
}

void ShardedAdamW::gather_masters(float* full, float* buffer, Backend& backend, Stream& stream) {
  if (!masters_) throw std::logic_error("ShardedAdamW::gather_masters: made without pass weights");
  gather_shard(masters_, full, buffer, backend, stream);
}

void ShardedAdamW::keep_own_moments(const float* full_m, const float* full_v, Backend& backend, Stream& stream) {
  for (const Span& s : owned_) {
    backend.copy(m_ + s.shard_at, full_m + s.flat, s.length * sizeof(float), stream);
    backend.copy(v_ + s.shard_at, full_v + s.flat, s.length * sizeof(float), stream);
  }
}

}  // namespace pipelane
