// nn.MaxPool2d (padding never wins: padded cells are skipped; ties go to the first maximum in
// row-major window order, as PyTorch's CPU kernel) and nn.AdaptiveAvgPool2d (output cell i covers
// input [floor(i*In/Out), ceil((i+1)*In/Out))). Both run over output pixels; backward adds (+=)
// into the input's gradient. The math is the Backend's max_pool_* and adaptive_avg_pool_*.
#pragma once
#include "lanes/builtin/cnn/cnn_layer.h"

namespace pipelane::cnn {

class MaxPoolLayer final : public CnnLayer {
 public:
  MaxPoolLayer(std::string name, Feature* in, Feature* out, int kernel, int stride, int pad);
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override;
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override { return {in_}; }
  void plan_buffers(BufferPlan& plan) override;
  static int output_size(int input, int kernel, int stride, int pad) { return (input + 2 * pad - kernel) / stride + 1; }

 private:
  std::string name_;
  Feature* in_;
  Feature* out_;
  int kernel_, stride_, pad_;
  CnnWindow window_;
  std::int64_t* argmax_ = nullptr;  // per output element: the input element it came from
};

class AdaptiveAvgPoolLayer final : public CnnLayer {
 public:
  AdaptiveAvgPoolLayer(std::string name, Feature* in, Feature* out);
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override;
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override { return {in_}; }

 private:
  std::string name_;
  Feature* in_;
  Feature* out_;
  CnnWindow window_;
};

}  // namespace pipelane::cnn
