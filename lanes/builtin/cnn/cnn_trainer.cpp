#include "lanes/builtin/cnn/cnn_trainer.h"

#include <cmath>
#include <cstring>

#include "lanes/builtin/cnn/cross_entropy.h"

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
  const float lr = sgd_.lr, mu = sgd_.momentum, wd = sgd_.weight_decay;
  for (std::int64_t i = e0; i < e1; ++i) {
    const float d = p.grad[i] + wd * p.value[i];
    p.momentum[i] = mu * p.momentum[i] + d;
    p.value[i] -= lr * p.momentum[i];
    p.grad[i] = 0;  // ready for the next step's accumulation
  }
}

void CnnTrainer::run_op(const ProgramOp& op) {
  CnnCompute c{backend_, stream_, cols_, dcols_, step_, seed_};
  switch (op.kind) {
    case OpKind::Load: {
      const Feature& in = *net_.input;
      const std::size_t image = static_cast<std::size_t>(in.h) * in.w * in.c;
      for (std::int64_t i = op.r0; i < op.r1; ++i)
        loader_(step_ * in.n + i, in.value + i * image, net_.labels + i);
      break;
    }
    case OpKind::Forward: op.layer->forward(op.phase, op.r0, op.r1, c); break;
    case OpKind::Loss: {
      const Feature& l = *net_.logits;
      step_loss_ = cross_entropy(l.value, net_.labels, l.n, l.c, l.grad);
      if (!std::isfinite(step_loss_))
        throw LaneError("the loss is not finite at step " + std::to_string(step_ + 1));
      break;
    }
    case OpKind::ZeroGrad:
      std::memset(op.feature->grad + op.r0 * op.feature->c, 0,
                  static_cast<std::size_t>(op.r1 - op.r0) * op.feature->c * sizeof(float));
      break;
    case OpKind::Backward: op.layer->backward(op.phase, op.r0, op.r1, c); break;
    case OpKind::Statistics: op.layer->update_statistics(); break;
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
    w.bytes(p.value, p.size() * sizeof(float));
    w.bytes(p.momentum, p.size() * sizeof(float));
    if (updating) w.bytes(p.grad, p.size() * sizeof(float));
  }
  for (const CnnBuffer& b : net_.buffers()) w.bytes(b.value, b.size * sizeof(float));
  if (updating)
    for (auto& layer : net_.layers())
      for (const auto& [data, n] : layer->statistics_state()) w.bytes(data, n * sizeof(float));
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
    r.bytes(p.value, p.size() * sizeof(float));
    r.bytes(p.momentum, p.size() * sizeof(float));
    if (updating) r.bytes(p.grad, p.size() * sizeof(float));
    else std::memset(p.grad, 0, p.size() * sizeof(float));  // the step restarts from its beginning
  }
  for (CnnBuffer& b : net_.buffers()) r.bytes(b.value, b.size * sizeof(float));
  if (updating)
    for (auto& layer : net_.layers())
      for (const auto& [data, n] : layer->statistics_state()) r.bytes(data, n * sizeof(float));
  step_ = step;
  cursor_ = cursor;
  losses_ = std::move(losses);
}

}  // namespace pipelane::cnn
