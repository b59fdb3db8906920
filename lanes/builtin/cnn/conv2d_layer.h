// 2-D convolution (nn.Conv2d, groups 1, dilation 1) on NHWC features as im2col + one GEMM per
// block of output pixels, all through the Backend: Backend::cnn_im2col makes the block's patches
// rows of K = KH*KW*IC columns (ordered kh, kw, ic: the weight is stored [OC][KH][KW][IC]) and
// Backend::matmul_forward computes out[rows, OC] = cols @ W^T + bias. Backward recomputes the
// block's patches, gets dcols and dW (+=) from matmul_backward and gives dcols back with
// Backend::cnn_col2im (+=). A 1x1 stride-1 convolution without padding uses the input rows as
// they are (its input gradient is one add_inplace).
#pragma once
#include "lanes/builtin/cnn/cnn_layer.h"

namespace pipelane::cnn {

struct ConvShape {
  int kernel = 3, stride = 1, pad = 1;
};

class Conv2dLayer final : public CnnLayer {
 public:
  // weight: [OC][KH][KW][IC] (CnnParam with channels = IC, spatial = KH*KW); bias may be null.
  Conv2dLayer(std::string name, Feature* in, Feature* out, ConvShape shape, CnnParam* weight, CnnParam* bias);
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override;
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override;
  std::size_t scratch_floats_per_row() const override { return pointwise_ ? in_->c : patch_; }

  // Output side for an input side (floor, as PyTorch).
  static int output_size(int input, ConvShape s) { return (input + 2 * s.pad - s.kernel) / s.stride + 1; }

 private:
  // The block's patches: the input rows themselves (pointwise) or im2col into c.cols.
  const float* patches(std::int64_t r0, std::int64_t r1, CnnCompute& c) const;

  std::string name_;
  Feature* in_;
  Feature* out_;
  ConvShape s_;
  CnnParam* weight_;
  CnnParam* bias_;
  CnnWindow window_;
  std::size_t patch_;  // K
  bool pointwise_;     // 1x1, stride 1, no padding: the input rows are the patches
};

}  // namespace pipelane::cnn
