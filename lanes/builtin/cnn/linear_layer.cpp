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

std::vector<LayerPhase> LinearLayer::forward_phases() const {
  const double weights = static_cast<double>(in_features_) * out_->c;
  return {{out_->n, 2.0 * weights, kWeightPackCost * weights}};
}

std::vector<LayerPhase> LinearLayer::backward_phases() const {
  const double weights = static_cast<double>(in_features_) * out_->c;
  return {{out_->n, 4.0 * weights + kElementCost * in_features_, 2 * kWeightPackCost * weights}};
}

void LinearLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.matmul_forward(out_->value + r0 * out_->c, in_->value + r0 * in_features_, weight_->value, bias_->value,
                           static_cast<int>(r1 - r0), static_cast<int>(in_features_), out_->c, c.stream);
}

void LinearLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.matmul_backward(c.dcols, weight_->grad, bias_->grad, out_->grad + r0 * out_->c,
                            in_->value + r0 * in_features_, weight_->value, static_cast<int>(r1 - r0),
                            static_cast<int>(in_features_), out_->c, c.stream);
  c.backend.add_inplace(in_->grad + r0 * in_features_, c.dcols, static_cast<std::size_t>(r1 - r0) * in_features_,
                        c.stream);
}

}  // namespace pipelane::cnn
