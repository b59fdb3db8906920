#include "lanes/builtin/cnn/pooling_layers.h"

#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {

MaxPoolLayer::MaxPoolLayer(std::string name, Feature* in, Feature* out, int kernel, int stride, int pad)
    : name_(std::move(name)), in_(in), out_(out), kernel_(kernel), stride_(stride), pad_(pad),
      window_{in->n, in->h, in->w, in->c, out->h, out->w, kernel, stride, pad} {
  if (out->n != in->n || out->c != in->c || out->h != output_size(in->h, kernel, stride, pad) ||
      out->w != output_size(in->w, kernel, stride, pad) || out->h < 1 || out->w < 1)
    throw std::logic_error("MaxPoolLayer " + name_ + ": shapes do not agree");
  if (kernel * kernel > 64 || pad >= kernel) throw std::logic_error("MaxPoolLayer " + name_ + ": kernel too large");
}

void MaxPoolLayer::plan_buffers(BufferPlan& plan) { plan.add(&argmax_, out_->size(), "max pool argmax"); }

std::vector<LayerPhase> MaxPoolLayer::forward_phases() const {
  return {{out_->rows(), 2 * kElementCost * out_->c * kernel_ * kernel_}};
}
std::vector<LayerPhase> MaxPoolLayer::backward_phases() const { return {{out_->rows(), kElementCost * out_->c}}; }

void MaxPoolLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.max_pool_forward(out_->value, argmax_, in_->value, window_, r0, r1, c.stream);
}

void MaxPoolLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.max_pool_backward(in_->grad, out_->grad, argmax_, window_, r0, r1, c.stream);
}

AdaptiveAvgPoolLayer::AdaptiveAvgPoolLayer(std::string name, Feature* in, Feature* out)
    : name_(std::move(name)), in_(in), out_(out), window_{in->n, in->h, in->w, in->c, out->h, out->w, 1, 1, 0} {
  if (out->n != in->n || out->c != in->c) throw std::logic_error("AdaptiveAvgPoolLayer " + name_ + ": shapes do not agree");
}

std::vector<LayerPhase> AdaptiveAvgPoolLayer::forward_phases() const {
  const double cells = static_cast<double>((in_->h + out_->h - 1) / out_->h + 1) * ((in_->w + out_->w - 1) / out_->w + 1);
  return {{out_->rows(), kElementCost * out_->c * cells}};
}
std::vector<LayerPhase> AdaptiveAvgPoolLayer::backward_phases() const { return forward_phases(); }

void AdaptiveAvgPoolLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.adaptive_avg_pool_forward(out_->value, in_->value, window_, r0, r1, c.stream);
}

void AdaptiveAvgPoolLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.adaptive_avg_pool_backward(in_->grad, out_->grad, window_, r0, r1, c.stream);
}

}  // namespace pipelane::cnn
