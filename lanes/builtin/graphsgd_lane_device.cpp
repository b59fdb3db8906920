#include "lanes/builtin/graphsgd_lane_device.h"

#include <algorithm>
#include <string>

#include "runtime/graph_step_finish.h"

namespace pipelane {

GraphSgdDeviceRun::GraphSgdDeviceRun(LaneContext& ctx, const GraphSgdHostGraph& g, const GraphSgdConfig& config,
                                     const float* user, const float* item)
    : ctx_(ctx), n_(static_cast<std::uint32_t>(g.vertices)), m_(g.edges), config_(config) {
  // One pass cut as the host loop cuts it (an edge or a row passed one unit each), slices that
  // visit no edge dropped: the last slice ends at m_, and ends the pass on the device.
  std::uint64_t row = 0, edge = 0;
  while (edge < m_) {
    std::int64_t budget = config.slice_edges;
    const Slice start{row, edge, edge};
    while (budget > 0 && row < n_) {
      const std::uint64_t row_end = g.offsets[row + 1];
      const std::uint64_t take = std::min<std::uint64_t>(row_end - edge, static_cast<std::uint64_t>(budget));
      edge += take;
      budget -= static_cast<std::int64_t>(take);
      if (edge == row_end) {
        ++row;
        --budget;
      }
    }
    if (edge > start.edge_begin) slices_.push_back(Slice{start.row, start.edge_begin, edge});
  }
  Arena& arena = ctx.arena;
  const std::size_t floats = static_cast<std::size_t>(n_) * static_cast<std::size_t>(config.latent_dim);
  offsets_ = arena.allocate_n<std::uint64_t>(n_ + std::size_t{1}, "graphsgd offsets");
  items_ = arena.allocate_n<std::uint32_t>(m_, "graphsgd items");
  ratings_ = arena.allocate_n<float>(m_, "graphsgd ratings");
  user_ = arena.allocate_n<float>(floats, "graphsgd user vectors");
  item_ = arena.allocate_n<float>(floats, "graphsgd item vectors");
  state_ = arena.allocate_n<GraphSgdState>(1, "graphsgd state");
  history_ = arena.allocate_n<double>(std::max<std::uint32_t>(config.history_capacity, 1), "graphsgd rmse history");
  readback_arena_ = ctx.backend.create_arena("graphsgd state readback", sizeof(GraphSgdState) + 64,
                                             MemoryKind::PinnedHost);
  readback_ = readback_arena_->allocate_n<GraphSgdState>(1, "graphsgd state readback");
  readback_done_ = ctx.backend.create_event();
  known_ = GraphSgdState{};
  Backend& b = ctx.backend;
  b.copy(offsets_, g.offsets, (n_ + std::size_t{1}) * sizeof(std::uint64_t), ctx.stream);
  b.copy(items_, g.items, m_ * sizeof(std::uint32_t), ctx.stream);
  b.copy(ratings_, g.ratings, m_ * sizeof(float), ctx.stream);
  b.copy(user_, user, floats * sizeof(float), ctx.stream);
  b.copy(item_, item, floats * sizeof(float), ctx.stream);
  b.copy(state_, &known_, sizeof known_, ctx.stream);
  ctx.stream.synchronize();  // setup, before training: the host copies may go after this
}

void GraphSgdDeviceRun::poll() {
  if (!readback_pending_ || !readback_done_->query()) return;
  readback_pending_ = false;
  known_ = *readback_;
  finished_ = known_.done != 0;
}

void GraphSgdDeviceRun::enqueue(std::uint32_t pass, std::uint64_t row, std::uint64_t begin, std::uint64_t end) {
  ctx_.backend.graphsgd_step(
      GraphSgdStep{offsets_, items_, ratings_, n_, m_, user_, item_, config_.latent_dim, config_.learning_rate,
                   config_.lambda, state_, history_, config_.history_capacity, config_.tolerance,
                   config_.max_iterations, pass, static_cast<std::uint32_t>(row), begin, end},
      ctx_.stream);
}

std::uint64_t GraphSgdDeviceRun::step() {
  poll();
  if (finished_ || enqueued_iterations_ >= config_.max_iterations) return 0;
  const Slice& slice = slices_[slice_];
  const std::uint64_t row = resume_from_ ? resume_.row : slice.row;
  const std::uint64_t begin = resume_from_ ? resume_.edge : slice.edge_begin;
  resume_from_ = false;
  enqueue(pass_, row, begin, slice.edge_end);
  if (++slice_ == slices_.size()) {
    slice_ = 0;
    if (pass_ == 0) {
      pass_ = 1;
    } else {  // the iteration's last slice: its state comes back
      pass_ = 0;
      ++enqueued_iterations_;
      ctx_.backend.copy(readback_, state_, sizeof(GraphSgdState), ctx_.stream);
      readback_done_->record(ctx_.stream);
      readback_pending_ = true;
    }
  }
  return slice.edge_end - begin;
}

void GraphSgdDeviceRun::sync() {
  ctx_.backend.copy(readback_, state_, sizeof(GraphSgdState), ctx_.stream);
  ctx_.stream.synchronize();
  readback_pending_ = false;
  known_ = *readback_;
  finished_ = known_.done != 0;
}

std::vector<double> GraphSgdDeviceRun::rmse_history() {
  sync();
  std::vector<double> h(static_cast<std::size_t>(
      std::min<std::int64_t>(known_.iterations, static_cast<std::int64_t>(config_.history_capacity))));
  ctx_.backend.copy(h.data(), history_, h.size() * sizeof(double), ctx_.stream);
  ctx_.stream.synchronize();
  return h;
}

GraphSgdDeviceRun::Snapshot GraphSgdDeviceRun::snapshot() {
  Snapshot s;
  s.rmse = rmse_history();  // syncs
  s.state = known_;
  if (!finished_) {  // every enqueued slice ran: the host's position is the device's
    const Slice& slice = slices_[slice_];
    s.at = resume_from_ ? resume_ : Position{pass_, slice.row, slice.edge_begin};
    s.at.pass = pass_;
  }
  const std::size_t floats = static_cast<std::size_t>(n_) * static_cast<std::size_t>(config_.latent_dim);
  s.user.resize(floats);
  s.item.resize(floats);
  ctx_.backend.copy(s.user.data(), user_, floats * sizeof(float), ctx_.stream);
  ctx_.backend.copy(s.item.data(), item_, floats * sizeof(float), ctx_.stream);
  ctx_.stream.synchronize();
  return s;
}

void GraphSgdDeviceRun::restore(Snapshot s) {
  const std::size_t floats = static_cast<std::size_t>(n_) * static_cast<std::size_t>(config_.latent_dim);
  if (s.user.size() != floats || s.item.size() != floats || s.at.pass > 1 || s.at.edge > m_ || s.at.row > n_)
    throw LaneError("graphsgd: saved state: vectors or position out of range");
  std::vector<double> history = s.rmse;
  history.resize(std::max<std::uint32_t>(config_.history_capacity, 1), 0.0);
  // A pass whose edges are all done but whose end the host loop has not run yet (it stopped at the
  // end of the last row, or before trailing rows without edges): run that end here.
  if (s.state.done == 0 && s.at.edge == m_) {
    GraphSgdStep end{};
    end.pass = s.at.pass;
    end.edges = m_;
    end.rmse_history = history.data();
    end.history_capacity = config_.history_capacity;
    end.tolerance = config_.tolerance;
    end.max_iterations = config_.max_iterations;
    graphsgd_end_pass(s.state, end);
    s.at = Position{s.at.pass == 0 ? 1u : 0u, 0, 0};
  }
  std::size_t slice = 0;
  bool inside = false;
  if (s.state.done == 0) {
    const auto at = std::upper_bound(slices_.begin(), slices_.end(), s.at.edge,
                                     [](std::uint64_t e, const Slice& sl) { return e < sl.edge_end; });
    if (at == slices_.end()) throw LaneError("graphsgd: saved state: edge position out of range");
    slice = static_cast<std::size_t>(at - slices_.begin());
    inside = s.at.edge != at->edge_begin || s.at.row != at->row;
  }
  Backend& b = ctx_.backend;
  b.copy(user_, s.user.data(), floats * sizeof(float), ctx_.stream);
  b.copy(item_, s.item.data(), floats * sizeof(float), ctx_.stream);
  b.copy(history_, history.data(), config_.history_capacity * sizeof(double), ctx_.stream);
  b.copy(state_, &s.state, sizeof s.state, ctx_.stream);
  ctx_.stream.synchronize();
  known_ = s.state;
  pass_ = s.at.pass;
  slice_ = slice;
  resume_ = s.at;
  resume_from_ = inside;
  enqueued_iterations_ = s.state.iterations;
  readback_pending_ = false;
  finished_ = known_.done != 0;
}

}  // namespace pipelane
