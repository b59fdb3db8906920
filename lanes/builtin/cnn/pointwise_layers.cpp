#include "lanes/builtin/cnn/pointwise_layers.h"

#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"
#include "lanes/builtin/cnn/cnn_random.h"

namespace pipelane::cnn {

std::vector<LayerPhase> ReluLayer::forward_phases() const { return {{x_->rows(), kElementCost * x_->c}}; }

void ReluLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  const std::size_t at = static_cast<std::size_t>(r0) * x_->c, n = static_cast<std::size_t>(r1 - r0) * x_->c;
  c.backend.relu_forward(x_->value + at, n, c.stream);
}

void ReluLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  // In place: the kept output is positive exactly where the input was.
  const std::size_t at = static_cast<std::size_t>(r0) * x_->c, n = static_cast<std::size_t>(r1 - r0) * x_->c;
  c.backend.relu_backward(x_->grad + at, x_->value + at, n, c.stream);
}

std::vector<LayerPhase> DropoutLayer::forward_phases() const { return {{x_->rows(), kElementCost * x_->c}}; }

void DropoutLayer::apply(float* data, std::int64_t r0, std::int64_t r1, const CnnCompute& c) const {
  const std::uint64_t base = stream_base(c.seed, name_key(name_) ^ mix64(static_cast<std::uint64_t>(c.step)));
  const std::size_t at = static_cast<std::size_t>(r0) * x_->c, n = static_cast<std::size_t>(r1 - r0) * x_->c;
  c.backend.dropout(data + at, n, base, at, p_, c.stream);
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

void ResidualAddLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  const std::size_t at = static_cast<std::size_t>(r0) * out_->c, n = static_cast<std::size_t>(r1 - r0) * out_->c;
  c.backend.add(out_->value + at, a_->value + at, b_->value + at, n, c.stream);
}

void ResidualAddLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  const std::size_t at = static_cast<std::size_t>(r0) * out_->c, n = static_cast<std::size_t>(r1 - r0) * out_->c;
  c.backend.add_inplace(a_->grad + at, out_->grad + at, n, c.stream);
  c.backend.add_inplace(b_->grad + at, out_->grad + at, n, c.stream);
}

}  // namespace pipelane::cnn
