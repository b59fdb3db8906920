#include "lanes/builtin/cnn/batch_norm_layer.h"

#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {

BatchNormLayer::BatchNormLayer(std::string name, Feature* in, Feature* out, CnnParam* weight, CnnParam* bias,
                               CnnBuffer* running_mean, CnnBuffer* running_var)
    : name_(std::move(name)), in_(in), out_(out), weight_(weight), bias_(bias), running_mean_(running_mean),
      running_var_(running_var) {
  if (in->size() != out->size() || in->c != out->c || weight->size() != static_cast<std::size_t>(in->c))
    throw std::logic_error("BatchNormLayer " + name_ + ": shapes do not agree");
}

void BatchNormLayer::plan_buffers(BufferPlan& plan) {
  const std::size_t C = static_cast<std::size_t>(in_->c);
  plan.add(&sum_a_, C, "batch norm sums");
  plan.add(&sum_b_, C, "batch norm sums");
  plan.add(&mean_, C, "batch norm mean");
  plan.add(&rstd_, C, "batch norm rstd");
  plan.add(&var_unbiased_, C, "batch norm variance");
}

std::vector<LayerPhase> BatchNormLayer::forward_phases() const {
  const double row = kElementCost * in_->c;
  return {{in_->rows(), row}, {in_->rows(), row}, {in_->rows(), row}};
}

std::vector<LayerPhase> BatchNormLayer::backward_phases() const {
  const double row = kElementCost * in_->c;
  return {{in_->rows(), 2 * row}, {in_->rows(), 2 * row}};
}

BatchNormTensors BatchNormLayer::tensors() const {
  BatchNormTensors t;
  t.x = in_->value;
  t.y = out_->value;
  t.dy = out_->grad;
  t.dx = in_->grad;
  t.weight = weight_->value;
  t.bias = bias_->value;
  t.dweight = weight_->grad;
  t.dbias = bias_->grad;
  t.sum_a = sum_a_;
  t.sum_b = sum_b_;
  t.mean = mean_;
  t.rstd = rstd_;
  t.var_unbiased = var_unbiased_;
  t.rows = in_->rows();
  t.C = in_->c;
  t.eps = kBatchNormEps;
  return t;
}

void BatchNormLayer::forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.batch_norm_forward(phase, tensors(), r0, r1, c.stream);
}

void BatchNormLayer::backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  c.backend.batch_norm_backward(phase, tensors(), r0, r1, c.stream);
}

void BatchNormLayer::update_statistics(CnnCompute& c) {
  c.backend.batch_norm_update_statistics(running_mean_->value, running_var_->value, mean_, var_unbiased_, in_->c,
                                         kBatchNormMomentum, c.stream);
}

std::vector<std::pair<float*, std::size_t>> BatchNormLayer::statistics_state() {
  const std::size_t C = static_cast<std::size_t>(in_->c);
  return {{mean_, C}, {var_unbiased_, C}};
}

}  // namespace pipelane::cnn
