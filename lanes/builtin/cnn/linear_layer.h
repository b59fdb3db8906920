// nn.Linear on a flattened feature: a row per image (h*w*c inputs, in NHWC order: the weight's
// columns are stored [H][W][C], torch's [C][H][W] by CnnParam's channels/spatial), out [n, 1, 1, OC].
// Backend::matmul_forward / matmul_backward over blocks of images.
#pragma once
#include "lanes/builtin/cnn/cnn_layer.h"

namespace pipelane::cnn {

class LinearLayer final : public CnnLayer {
 public:
  LinearLayer(std::string name, Feature* in, Feature* out, CnnParam* weight, CnnParam* bias);
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override;
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override { return {in_}; }
  std::size_t scratch_floats_per_row() const override { return in_features_; }

 private:
  std::string name_;
  Feature* in_;
  Feature* out_;
  CnnParam* weight_;
  CnnParam* bias_;
  std::size_t in_features_;
};

}  // namespace pipelane::cnn
