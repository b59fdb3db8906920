#include "lanes/builtin/cnn/pointwise_layers.h"

#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"
#include "lanes/builtin/cnn/cnn_random.h"

namespace pipelane::cnn {

std::vector<LayerPhase> ReluLayer::forward_phases() const { return {{x_->rows(), kElementCost * x_->c}}; }

void ReluLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  for (std::int64_t i = r0 * x_->c; i < r1 * x_->c; ++i) x_->value[i] = x_->value[i] > 0 ? x_->value[i] : 0.0f;
}

void ReluLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  // The output is what is kept: positive exactly where the input was. A select, not a branch: the
  // signs are random, and a mispredicted branch per element made this loop 100x slower.
  for (std::int64_t i = r0 * x_->c; i < r1 * x_->c; ++i) x_->grad[i] = x_->value[i] > 0 ? x_->grad[i] : 0.0f;
}

std::vector<LayerPhase> DropoutLayer::forward_phases() const { return {{x_->rows(), kElementCost * x_->c}}; }

void DropoutLayer::apply(float* data, std::int64_t r0, std::int64_t r1, const CnnCompute& c) const {
  const std::uint64_t base = stream_base(c.seed, name_key(name_) ^ mix64(static_cast<std::uint64_t>(c.step)));
  const float keep_scale = 1.0f / (1.0f - p_);
  for (std::int64_t i = r0 * x_->c; i < r1 * x_->c; ++i)
    data[i] = uniform01_at(base, static_cast<std::uint64_t>(i)) < p_ ? 0.0f : data[i] * keep_scale;
}

void DropoutLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) { apply(x_->value, r0, r1, c); }
void DropoutLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) { apply(x_->grad, r0, r1, c); }

ResidualAddLayer::ResidualAddLayer(std::string name, Feature* a, Feature* b, Feature* out)
    : name_(std::move(name)), a_(a), b_(b), out_(out) {
  if (a->size() != out->size() || b->size() != out->size() || a->c != out->c || b->c != out->c)
    throw std::logic_error("ResidualAddLayer " + name_ + ": shapes do not agree");
}

std::vector<LayerPhase> ResidualAddLayer::forward_phases() const {
  return {{out_->rows(), 2 * kElementCost * out_->c}};
}

void ResidualAddLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  for (std::int64_t i = r0 * out_->c; i < r1 * out_->c; ++i) out_->value[i] = a_->value[i] + b_->value[i];
}

void ResidualAddLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  for (std::int64_t i = r0 * out_->c; i < r1 * out_->c; ++i) {
    a_->grad[i] += out_->grad[i];
    b_->grad[i] += out_->grad[i];
  }
}

}  // namespace pipelane::cnn
