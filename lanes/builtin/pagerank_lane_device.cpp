#include "lanes/builtin/pagerank_lane_device.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace pipelane {

PagerankDeviceRun::PagerankDeviceRun(LaneContext& ctx, const PagerankHostCsr& g, float damping, double tolerance,
                                     std::int64_t max_iterations, std::int64_t slice_edges)
    : ctx_(ctx), n_(static_cast<std::uint32_t>(g.vertices)), m_(g.edges), damping_(damping), tolerance_(tolerance),
      max_iterations_(max_iterations) {
  // Slices of whole vertices: an in-edge and a vertex are one unit each, at least one vertex.
  for (std::uint32_t v = 0; v < n_;) {
    std::int64_t budget = slice_edges;
    while (v < n_ && budget > 0) {
      budget -= static_cast<std::int64_t>(g.offsets[v + 1] - g.offsets[v]) + 1;
      ++v;
    }
    slice_ends_.push_back(v);
    end_offsets_.push_back(g.offsets[v]);
  }
  Arena& arena = ctx.arena;
  offsets_ = arena.allocate_n<std::uint64_t>(n_ + std::size_t{1}, "pagerank in-edge offsets");
  sources_ = arena.allocate_n<std::uint32_t>(std::max<std::uint64_t>(m_, 1), "pagerank in-edge sources");
  out_degree_ = arena.allocate_n<std::uint32_t>(n_, "pagerank out-degrees");
  for (int k = 0; k < 2; ++k) {
    rank_[k] = arena.allocate_n<float>(n_, "pagerank ranks");
    contrib_[k] = arena.allocate_n<float>(n_, "pagerank contributions");
  }
  delta_ = arena.allocate_n<float>(n_, "pagerank deltas");
  state_ = arena.allocate_n<PagerankState>(1, "pagerank state");
  readback_arena_ = ctx.backend.create_arena("pagerank state readback", sizeof(PagerankState) + 64,
                                             MemoryKind::PinnedHost);
  readback_ = readback_arena_->allocate_n<PagerankState>(1, "pagerank state readback");
  readback_done_ = ctx.backend.create_event();

  // The start: ranks 1/N, base from the rank held by the vertices without out-edges.
  const float r0 = 1.0f / static_cast<float>(n_);
  std::vector<float> rank(n_, r0), contrib(n_);
  double dangling = 0;
  for (std::uint32_t v = 0; v < n_; ++v) {
    contrib[v] = g.out_degree[v] == 0 ? 0.0f : r0 / static_cast<float>(g.out_degree[v]);
    if (g.out_degree[v] == 0) dangling += r0;
  }
  const double n = static_cast<double>(n_), d = static_cast<double>(damping_);
  known_ = PagerankState{};
  known_.base = static_cast<float>(std::fma(d, dangling / n, (1.0 - d) / n));
  // Copies from pageable host memory take their source at the call: the vectors may go after it.
  Backend& b = ctx.backend;
  b.copy(offsets_, g.offsets, (n_ + std::size_t{1}) * sizeof(std::uint64_t), ctx.stream);
  b.copy(sources_, g.sources, m_ * sizeof(std::uint32_t), ctx.stream);
  b.copy(out_degree_, g.out_degree, n_ * sizeof(std::uint32_t), ctx.stream);
  b.copy(rank_[0], rank.data(), n_ * sizeof(float), ctx.stream);
  b.copy(contrib_[0], contrib.data(), n_ * sizeof(float), ctx.stream);
  b.copy(state_, &known_, sizeof known_, ctx.stream);
  ctx.stream.synchronize();  // setup, before training: the staging vectors go now
}

void PagerankDeviceRun::poll() {
  if (!readback_pending_ || !readback_done_->query()) return;
  readback_pending_ = false;
  known_ = *readback_;
  finished_ = known_.done != 0;
}

std::uint64_t PagerankDeviceRun::step() {
  poll();
  if (finished_ || enqueued_iterations_ >= max_iterations_) return 0;
  const int in = static_cast<int>(enqueued_iterations_ % 2);
  const std::uint32_t begin = slice_ == 0 ? 0 : slice_ends_[slice_ - 1];
  const std::uint32_t end = slice_ends_[slice_];
  ctx_.backend.pagerank_step(PagerankStep{offsets_, sources_, out_degree_, n_, rank_[in], contrib_[in], rank_[1 - in],
                                          contrib_[1 - in], delta_, state_, damping_, tolerance_, max_iterations_,
                                          begin, end},
                             ctx_.stream);
  const std::uint64_t edges = end_offsets_[slice_] - (slice_ == 0 ? 0 : end_offsets_[slice_ - 1]);
  if (++slice_ == slice_ends_.size()) {  // the iteration's last slice: its state comes back
    slice_ = 0;
    ++enqueued_iterations_;
    ctx_.backend.copy(readback_, state_, sizeof(PagerankState), ctx_.stream);
    readback_done_->record(ctx_.stream);
    readback_pending_ = true;
  }
  return edges;
}

void PagerankDeviceRun::sync() {
  ctx_.backend.copy(readback_, state_, sizeof(PagerankState), ctx_.stream);
  ctx_.stream.synchronize();
  readback_pending_ = false;
  known_ = *readback_;
  finished_ = known_.done != 0;
}

std::vector<float> PagerankDeviceRun::download(const float* device) {
  std::vector<float> host(n_);
  ctx_.backend.copy(host.data(), device, n_ * sizeof(float), ctx_.stream);
  ctx_.stream.synchronize();
  return host;
}

std::vector<float> PagerankDeviceRun::ranks() {
  sync();
  return download(rank_[known_.iterations % 2]);
}

PagerankDeviceRun::Snapshot PagerankDeviceRun::snapshot() {
  sync();
  Snapshot s;
  s.state = known_;
  // Not over: every enqueued slice ran, so the host's position is the device's. Over: the
  // position is where the last iteration ended.
  s.vertex = finished_ || slice_ == 0 ? 0 : slice_ends_[slice_ - 1];
  for (int k = 0; k < 2; ++k) {
    s.rank[k] = download(rank_[k]);
    s.contrib[k] = download(contrib_[k]);
  }
  return s;
}

void PagerankDeviceRun::restore(const Snapshot& s) {
  std::size_t slice = 0;
  if (s.vertex != 0) {
    const auto at = std::find(slice_ends_.begin(), slice_ends_.end(), s.vertex);
    if (at == slice_ends_.end() || s.vertex == n_)
      throw LaneError("pagerank: saved state stopped mid-iteration at vertex " + std::to_string(s.vertex) +
                      ", where no slice of this run starts (another slice_edges?)");
    slice = static_cast<std::size_t>(at - slice_ends_.begin()) + 1;
  }
  for (int k = 0; k < 2; ++k)
    if (s.rank[k].size() != n_ || s.contrib[k].size() != n_)
      throw LaneError("pagerank: saved state has rank vectors of another length");
  for (int k = 0; k < 2; ++k) {
    ctx_.backend.copy(rank_[k], s.rank[k].data(), n_ * sizeof(float), ctx_.stream);
    ctx_.backend.copy(contrib_[k], s.contrib[k].data(), n_ * sizeof(float), ctx_.stream);
  }
  ctx_.backend.copy(state_, &s.state, sizeof s.state, ctx_.stream);
  ctx_.stream.synchronize();
  known_ = s.state;
  slice_ = slice;
  enqueued_iterations_ = s.state.iterations;
  readback_pending_ = false;
  finished_ = known_.done != 0;
}

}  // namespace pipelane
