#include "lanes/builtin/cnn/cnn_trainer.h"

#include <cmath>
#include <vector>


namespace pipelane::cnn {

CnnTrainer::CnnTrainer(CnnNetwork& net, Backend& backend, Stream& stream, SgdSettings sgd, double block_budget,
                       double load_cost_per_image, ImageLoader loader, std::uint64_t seed)
    : net_(net), backend_(backend), stream_(stream), sgd_(sgd), loader_(std::move(loader)), seed_(seed),
      program_(build_program(net, block_budget, load_cost_per_image)) {}

void CnnTrainer::plan_buffers(BufferPlan& plan) {
  plan.add(&cols_, program_.scratch_floats, "im2col scratch");
  plan.add(&dcols_, program_.scratch_floats, "im2col gradient scratch");
}

void CnnTrainer::sgd(CnnParam& p, std::int64_t e0, std::int64_t e1) const {
  backend_.sgd_momentum_update(p.value + e0, p.grad + e0, p.momentum + e0, static_cast<std::size_t>(e1 - e0),
                               SgdMomentumParams{sgd_.lr, sgd_.momentum, sgd_.weight_decay}, stream_);
}

void CnnTrainer::load_images(std::int64_t i0, std::int64_t i1) {
  // Images are made on the host (decoded or synthetic) and copied in: the arena may be device memory.
  const Feature& in = *net_.input;
  const std::size_t image = static_cast<std::size_t>(in.h) * in.w * in.c, count = static_cast<std::size_t>(i1 - i0);
  staged_pixels_.resize(count * image);
  staged_labels_.resize(count);
  for (std::int64_t i = i0; i < i1; ++i)
    loader_(step_ * in.n + i, staged_pixels_.data() + (i - i0) * image, staged_labels_.data() + (i - i0));
  backend_.copy(in.value + i0 * image, staged_pixels_.data(), count * image * sizeof(float), stream_);
  backend_.copy(net_.labels + i0, staged_labels_.data(), count * sizeof(std::int32_t), stream_);
  stream_.synchronize();  // the staging is reused by the next load
}

void CnnTrainer::run_op(const ProgramOp& op) {
  CnnCompute c{backend_, stream_, cols_, dcols_, step_, seed_};
  switch (op.kind) {
    case OpKind::Load: load_images(op.r0, op.r1); break;
    case OpKind::Forward: op.layer->forward(op.phase, op.r0, op.r1, c); break;
    case OpKind::Loss: {
      const Feature& l = *net_.logits;
      step_loss_ = backend_.classifier_cross_entropy(l.grad, l.value, net_.labels, l.n, l.c, stream_);
      if (!std::isfinite(step_loss_))
        throw LaneError("the loss is not finite at step " + std::to_string(step_ + 1));
      break;
    }
    case OpKind::ZeroGrad:
      backend_.memset_zero(op.feature->grad + op.r0 * op.feature->c,
                           static_cast<std::size_t>(op.r1 - op.r0) * op.feature->c * sizeof(float), stream_);
      break;
    case OpKind::Backward: op.layer->backward(op.phase, op.r0, op.r1, c); break;
    case OpKind::Statistics: op.layer->update_statistics(c); break;
    case OpKind::Sgd: sgd(*op.param, op.r0, op.r1); break;
  }
}

double CnnTrainer::images_done() const {
  const double batch = net_.input->n;
  return static_cast<double>(step_) * batch + batch * program_.cost_before[cursor_] / program_.total_cost;
}

double CnnTrainer::run(double budget) {
  const std::size_t first = cursor_;
  std::size_t end = cursor_;
  do {
    run_op(program_.ops[end]);
    ++end;
  } while (end < program_.ops.size() &&
           program_.cost_before[end + 1] - program_.cost_before[first] <= budget);
  if (end == program_.ops.size()) {
    cursor_ = 0;
    ++step_;
    losses_.push_back(step_loss_);
  } else {
    cursor_ = end;
  }
  return net_.input->n * (program_.cost_before[end] - program_.cost_before[first]) / program_.total_cost;
}

void CnnTrainer::save(StateWriter& w) const {
  const bool updating = cursor_ >= program_.first_update;
  w.put<std::int64_t>(step_);
  w.put<std::uint64_t>(updating ? cursor_ : 0);
  w.put<double>(step_loss_);
  w.put<std::uint64_t>(losses_.size());
  w.bytes(losses_.data(), losses_.size() * sizeof(double));
  for (const CnnParam& p : net_.params()) {
    save_floats(w, p.value, p.size());
    save_floats(w, p.momentum, p.size());
    if (updating) save_floats(w, p.grad, p.size());
  }
  for (const CnnBuffer& b : net_.buffers()) save_floats(w, b.value, b.size);
  if (updating)
    for (auto& layer : net_.layers())
      for (const auto& [data, n] : layer->statistics_state()) save_floats(w, data, n);
}

void CnnTrainer::save_floats(StateWriter& w, const float* arena_floats, std::size_t n) const {
  std::vector<float> host(n);
  backend_.copy(host.data(), arena_floats, n * sizeof(float), stream_);
  stream_.synchronize();
  w.bytes(host.data(), n * sizeof(float));
}

void CnnTrainer::load_floats(StateReader& r, float* arena_floats, std::size_t n) {
  std::vector<float> host(n);
  r.bytes(host.data(), n * sizeof(float));
  backend_.copy(arena_floats, host.data(), n * sizeof(float), stream_);
  stream_.synchronize();
}

void CnnTrainer::load(StateReader& r) {
  const auto step = r.get<std::int64_t>();
  const auto cursor = r.get<std::uint64_t>();
  if (step < 0 || cursor >= program_.ops.size() || (cursor != 0 && cursor < program_.first_update))
    throw LaneError("saved state has a step position this network does not have");
  const bool updating = cursor != 0;
  step_loss_ = r.get<double>();
  const auto n_losses = r.get<std::uint64_t>();
  if (n_losses != static_cast<std::uint64_t>(step))
    throw LaneError("saved state is inconsistent (" + std::to_string(n_losses) + " losses for " +
                    std::to_string(step) + " steps)");
  std::vector<double> losses(n_losses);
  r.bytes(losses.data(), n_losses * sizeof(double));
  for (CnnParam& p : net_.params()) {
    load_floats(r, p.value, p.size());
    load_floats(r, p.momentum, p.size());
    if (updating) load_floats(r, p.grad, p.size());
    else backend_.memset_zero(p.grad, p.size() * sizeof(float), stream_);  // the step restarts from its beginning
  }
  for (CnnBuffer& b : net_.buffers()) load_floats(r, b.value, b.size);
  if (updating)
    for (auto& layer : net_.layers())
      for (const auto& [data, n] : layer->statistics_state()) load_floats(r, data, n);
  stream_.synchronize();
  step_ = step;
  cursor_ = cursor;
  losses_ = std::move(losses);
}

}  // namespace pipelane::cnn
