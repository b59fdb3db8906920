#include "lanes/builtin/cnn/linear_layer.h"

#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {

LinearLayer::LinearLayer(std::string name, Feature* in, Feature* out, CnnParam* weight, CnnParam* bias)
    : name_(std::move(name)), in_(in), out_(out), weight_(weight), bias_(bias),
      in_features_(static_cast<std::size_t>(in->h) * in->w * in->c) {
  if (out->n != in->n || out->h != 1 || out->w != 1 || weight->size() != in_features_ * out->c ||
      bias->size() != static_cast<std::size_t>(out->c))
    throw std::logic_error("LinearLayer " + name_ + ": shapes do not agree");
}

// Few rows (a batch) against a large weight: the GEMM streams the weight (forward) or the weight and
// its gradient (backward) from memory once per block, which costs more than its flops; charged as
// kMemoryCost per weight element streamed, spread over the rows (one block per phase at the
// budgets these layers run at).
namespace {
constexpr double kMemoryCost = 4 * kElementCost;
}

std::vector<LayerPhase> LinearLayer::forward_phases() const {
  const double weights = static_cast<double>(in_features_) * out_->c;
  return {{out_->n, 2.0 * weights + kMemoryCost * weights / out_->n}};
}

std::vector<LayerPhase> LinearLayer::backward_phases() const {
  const double weights = static_cast<double>(in_features_) * out_->c;
  return {{out_->n, 4.0 * weights + 3 * kMemoryCost * weights / out_->n + kElementCost * in_features_}};
}

void LinearLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.matmul_forward(out_->value + r0 * out_->c, in_->value + r0 * in_features_, weight_->value, bias_->value,
                           static_cast<int>(r1 - r0), static_cast<int>(in_features_), out_->c, c.stream);
}

void LinearLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.matmul_backward(c.dcols, weight_->grad, bias_->grad, out_->grad + r0 * out_->c,
                            in_->value + r0 * in_features_, weight_->value, static_cast<int>(r1 - r0),
                            static_cast<int>(in_features_), out_->c, c.stream);
  float* dx = in_->grad + r0 * in_features_;
  const std::size_t n = static_cast<std::size_t>(r1 - r0) * in_features_;
  for (std::size_t i = 0; i < n; ++i) dx[i] += c.dcols[i];
}

}  // namespace pipelane::cnn
