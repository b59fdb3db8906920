#include "lanes/builtin/cnn/conv2d_layer.h"

#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {

Conv2dLayer::Conv2dLayer(std::string name, Feature* in, Feature* out, ConvShape shape, CnnParam* weight,
                         CnnParam* bias)
    : name_(std::move(name)), in_(in), out_(out), s_(shape), weight_(weight), bias_(bias),
      window_{in->n, in->h, in->w, in->c, out->h, out->w, shape.kernel, shape.stride, shape.pad},
      patch_(static_cast<std::size_t>(shape.kernel) * shape.kernel * in->c),
      pointwise_(shape.kernel == 1 && shape.stride == 1 && shape.pad == 0) {
  if (out->n != in->n || out->h != output_size(in->h, shape) || out->w != output_size(in->w, shape) ||
      weight->size() != patch_ * out->c)
    throw std::logic_error("Conv2dLayer " + name_ + ": shapes do not agree");
}

std::vector<LayerPhase> Conv2dLayer::forward_phases() const {
  const double gemm = 2.0 * static_cast<double>(patch_) * out_->c;
  return {{out_->rows(), gemm + kElementCost * (pointwise_ ? 0.0 : static_cast<double>(patch_)),
           kWeightPackCost * static_cast<double>(weight_->size())}};
}

std::vector<LayerPhase> Conv2dLayer::backward_phases() const {
  // dW always; dcols and col2im only when the input has a gradient.
  const bool dx = in_->needs_grad;
  const double gemm = (dx ? 4.0 : 2.0) * static_cast<double>(patch_) * out_->c;
  const double loops = (pointwise_ ? 0.0 : 1.0) + (dx ? 1.0 : 0.0);
  // Two GEMMs (dW and dcols), each packing the weight or its gradient.
  return {{out_->rows(), gemm + kElementCost * loops * static_cast<double>(patch_),
           (dx ? 2.0 : 1.0) * kWeightPackCost * static_cast<double>(weight_->size())}};
}

std::vector<Feature*> Conv2dLayer::grad_inputs() const {
  if (!in_->needs_grad) return {};
  return {in_};
}

const float* Conv2dLayer::patches(std::int64_t r0, std::int64_t r1, CnnCompute& c) const {
  if (pointwise_) return in_->value + static_cast<std::size_t>(r0) * in_->c;
  c.backend.cnn_im2col(c.cols, in_->value, window_, r0, r1, c.stream);
  return c.cols;
}

void Conv2dLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  const float* cols = patches(r0, r1, c);
  c.backend.matmul_forward(out_->value + static_cast<std::size_t>(r0) * out_->c, cols, weight_->value,
                           bias_ ? bias_->value : nullptr, static_cast<int>(r1 - r0), static_cast<int>(patch_),
                           out_->c, c.stream);
}

void Conv2dLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  const float* cols = patches(r0, r1, c);
  const bool dx = in_->needs_grad;
  const int rows = static_cast<int>(r1 - r0);
  c.backend.matmul_backward(dx ? c.dcols : nullptr, weight_->grad, bias_ ? bias_->grad : nullptr,
                            out_->grad + static_cast<std::size_t>(r0) * out_->c, cols, weight_->value, rows,
                            static_cast<int>(patch_), out_->c, c.stream);
  if (!dx) return;
  if (!pointwise_) {
    c.backend.cnn_col2im(in_->grad, c.dcols, window_, r0, r1, c.stream);
    return;
  }
  c.backend.add_inplace(in_->grad + static_cast<std::size_t>(r0) * in_->c, c.dcols,
                        static_cast<std::size_t>(rows) * in_->c, c.stream);
}

}  // namespace pipelane::cnn
