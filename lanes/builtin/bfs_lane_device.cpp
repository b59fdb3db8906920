#include "lanes/builtin/bfs_lane_device.h"

#include <algorithm>
#include <string>

namespace pipelane {

namespace {
constexpr std::uint64_t kPassesAhead = 4;
}  // namespace

BfsDeviceRun::BfsDeviceRun(LaneContext& ctx, const BfsHostCsr& g, std::uint64_t first_source,
                           std::int64_t traversals, std::int64_t slice_edges, std::uint32_t record_capacity)
    : ctx_(ctx), n_(static_cast<std::uint32_t>(g.vertices)), m_(g.edges), first_source_(first_source),
      traversals_(traversals), record_capacity_(record_capacity) {
  for (std::uint32_t v = 0; v < n_;) {  // whole vertices: an in-edge and a vertex one unit each
    std::int64_t budget = slice_edges;
    while (v < n_ && budget > 0) {
      budget -= static_cast<std::int64_t>(g.offsets[v + 1] - g.offsets[v]) + 1;
      ++v;
    }
    slice_ends_.push_back(v);
    end_offsets_.push_back(g.offsets[v]);
  }
  Arena& arena = ctx.arena;
  offsets_ = arena.allocate_n<std::uint64_t>(n_ + std::size_t{1}, "bfs in-edge offsets");
  sources_ = arena.allocate_n<std::uint32_t>(std::max<std::uint64_t>(m_, 1), "bfs in-edge sources");
  for (int k = 0; k < 2; ++k) depth_[k] = arena.allocate_n<std::int32_t>(n_, "bfs depths");
  state_ = arena.allocate_n<BfsState>(1, "bfs state");
  records_ = arena.allocate_n<BfsTraversalRecord>(std::max<std::uint32_t>(record_capacity_, 1), "bfs traversal records");
  level_sizes_ = arena.allocate_n<std::uint64_t>(std::size_t{std::max<std::uint32_t>(record_capacity_, 1)} * kBfsRecordedLevels,
                                                 "bfs level sizes");
  readback_arena_ = ctx.backend.create_arena("bfs state readback", sizeof(BfsState) + 64, MemoryKind::PinnedHost);
  readback_ = readback_arena_->allocate_n<BfsState>(1, "bfs state readback");
  readback_done_ = ctx.backend.create_event();
  known_ = BfsState{};
  known_.source = first_source_;
  Backend& b = ctx.backend;
  b.copy(offsets_, g.offsets, (n_ + std::size_t{1}) * sizeof(std::uint64_t), ctx.stream);
  b.copy(sources_, g.sources, m_ * sizeof(std::uint32_t), ctx.stream);
  b.copy(state_, &known_, sizeof known_, ctx.stream);
  ctx.stream.synchronize();  // setup, before training: the host CSR may go after this
}

void BfsDeviceRun::poll() {
  if (!readback_pending_ || !readback_done_->query()) return;
  readback_pending_ = false;
  known_ = *readback_;
  finished_ = known_.done != 0;
}

std::uint64_t BfsDeviceRun::step() {
  poll();
  if (finished_) return 0;
  // The host does not know how many passes a traversal takes: it runs ahead of the state it has
  // read by at most kPassesAhead passes (no-ops once the device is done), and otherwise does
  // nothing this step rather than wait.
  if (enqueued_passes_ >= known_.passes + kPassesAhead) return 0;
  const int in = static_cast<int>(enqueued_passes_ % 2);
  const std::uint32_t begin = slice_ == 0 ? 0 : slice_ends_[slice_ - 1];
  const std::uint32_t end = slice_ends_[slice_];
  ctx_.backend.bfs_step(BfsStep{offsets_, sources_, n_, depth_[in], depth_[1 - in], state_, records_, level_sizes_,
                                record_capacity_, first_source_, traversals_, begin, end},
                        ctx_.stream);
  const std::uint64_t edges = end_offsets_[slice_] - (slice_ == 0 ? 0 : end_offsets_[slice_ - 1]);
  if (++slice_ == slice_ends_.size()) {  // the pass's last slice: its state comes back
    slice_ = 0;
    ++enqueued_passes_;
    ctx_.backend.copy(readback_, state_, sizeof(BfsState), ctx_.stream);
    readback_done_->record(ctx_.stream);
    readback_pending_ = true;
  }
  return edges;
}

void BfsDeviceRun::sync() {
  ctx_.backend.copy(readback_, state_, sizeof(BfsState), ctx_.stream);
  ctx_.stream.synchronize();
  readback_pending_ = false;
  known_ = *readback_;
  finished_ = known_.done != 0;
}

template <typename T>
std::vector<T> BfsDeviceRun::download(const T* device, std::size_t n) {
  std::vector<T> host(n);
  ctx_.backend.copy(host.data(), device, n * sizeof(T), ctx_.stream);
  ctx_.stream.synchronize();
  return host;
}

std::vector<std::int32_t> BfsDeviceRun::depths() {
  sync();
  return download(depth_[known_.passes % 2], n_);
}

std::vector<BfsTraversalRecord> BfsDeviceRun::records() { return download(records_, record_capacity_); }

std::vector<std::uint64_t> BfsDeviceRun::level_sizes() {
  return download(level_sizes_, std::size_t{record_capacity_} * kBfsRecordedLevels);
}

BfsDeviceRun::Snapshot BfsDeviceRun::snapshot() {
  sync();
  Snapshot s;
  s.state = known_;
  // Not over: every enqueued slice ran, so the host's position is the device's.
  s.vertex = finished_ || slice_ == 0 ? 0 : slice_ends_[slice_ - 1];
  for (int k = 0; k < 2; ++k) s.depth[k] = download(depth_[k], n_);
  s.records = records();
  s.level_sizes = level_sizes();
  return s;
}

void BfsDeviceRun::restore(const Snapshot& s) {
  std::size_t slice = 0;
  if (s.vertex != 0) {
    const auto at = std::find(slice_ends_.begin(), slice_ends_.end(), s.vertex);
    if (at == slice_ends_.end() || s.vertex == n_)
      throw LaneError("bfs: saved state stopped mid-pass at vertex " + std::to_string(s.vertex) +
                      ", where no slice of this run starts (another slice_edges?)");
    slice = static_cast<std::size_t>(at - slice_ends_.begin()) + 1;
  }
  if (s.depth[0].size() != n_ || s.depth[1].size() != n_ || s.records.size() != record_capacity_ ||
      s.level_sizes.size() != std::size_t{record_capacity_} * kBfsRecordedLevels)
    throw LaneError("bfs: saved state has buffers of another length");
  if (s.state.source >= n_ || s.state.level >= static_cast<std::int32_t>(n_))
    throw LaneError("bfs: saved state: source or level out of range");
  for (int k = 0; k < 2; ++k) ctx_.backend.copy(depth_[k], s.depth[k].data(), n_ * sizeof(std::int32_t), ctx_.stream);
  ctx_.backend.copy(records_, s.records.data(), record_capacity_ * sizeof(BfsTraversalRecord), ctx_.stream);
  ctx_.backend.copy(level_sizes_, s.level_sizes.data(), s.level_sizes.size() * sizeof(std::uint64_t), ctx_.stream);
  ctx_.backend.copy(state_, &s.state, sizeof s.state, ctx_.stream);
  ctx_.stream.synchronize();
  known_ = s.state;
  slice_ = slice;
  enqueued_passes_ = s.state.passes;
  readback_pending_ = false;
  finished_ = known_.done != 0;
}

void BfsDeviceRun::save_into(StateWriter& w) {
  const Snapshot s = snapshot();
  w.put(s.state);
  w.put(s.vertex);
  w.put(static_cast<std::uint64_t>(s.records.size()));
  for (int k = 0; k < 2; ++k) w.bytes(s.depth[k].data(), s.depth[k].size() * sizeof(std::int32_t));
  w.bytes(s.records.data(), s.records.size() * sizeof(BfsTraversalRecord));
  w.bytes(s.level_sizes.data(), s.level_sizes.size() * sizeof(std::uint64_t));
}

void BfsDeviceRun::load_from(StateReader& r) {
  Snapshot s;
  s.state = r.get<BfsState>();
  s.vertex = r.get<std::uint32_t>();
  const auto records = r.get<std::uint64_t>();
  if (records != record_capacity_) throw LaneError("bfs: saved state records another number of traversals");
  for (int k = 0; k < 2; ++k) {
    s.depth[k].resize(n_);
    r.bytes(s.depth[k].data(), n_ * sizeof(std::int32_t));
  }
  s.records.resize(records);
  r.bytes(s.records.data(), records * sizeof(BfsTraversalRecord));
  s.level_sizes.resize(records * kBfsRecordedLevels);
  r.bytes(s.level_sizes.data(), s.level_sizes.size() * sizeof(std::uint64_t));
  restore(s);
}

}  // namespace pipelane
