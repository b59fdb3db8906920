// Element-wise layers: ReLU and dropout in place (nn.ReLU(inplace=True) as torchvision uses it;
// backward turns the feature's gradient into its input's), and the residual sum of two features.
#pragma once
#include "lanes/builtin/cnn/cnn_layer.h"

namespace pipelane::cnn {

class ReluLayer final : public CnnLayer {
 public:
  ReluLayer(std::string name, Feature* x) : name_(std::move(name)), x_(x) {}
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override { return forward_phases(); }
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override { return {}; }  // in place: nothing to zero

 private:
  std::string name_;
  Feature* x_;
};

// nn.Dropout(p) in training mode: an element is zeroed with probability p, the others scaled by
// 1 / (1 - p). The mask is a function of (seed, step, layer, element) (cnn_random.h), so backward
// and a restarted step see the same one. PyTorch draws its own: a reference compares with p = 0.
class DropoutLayer final : public CnnLayer {
 public:
  DropoutLayer(std::string name, Feature* x, float p) : name_(std::move(name)), x_(x), p_(p) {}
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override { return forward_phases(); }
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override { return {}; }

 private:
  void apply(float* data, std::int64_t r0, std::int64_t r1, const CnnCompute& c) const;
  std::string name_;
  Feature* x_;
  float p_;
};

class ResidualAddLayer final : public CnnLayer {
 public:
  ResidualAddLayer(std::string name, Feature* a, Feature* b, Feature* out);
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override { return forward_phases(); }
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override { return {a_, b_}; }

 private:
  std::string name_;
  Feature* a_;
  Feature* b_;
  Feature* out_;
};

}  // namespace pipelane::cnn
