#include "lanes/builtin/cnn/conv2d_layer.h"

#include <cstring>
#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {

Conv2dLayer::Conv2dLayer(std::string name, Feature* in, Feature* out, ConvShape shape, CnnParam* weight,
                         CnnParam* bias)
    : name_(std::move(name)), in_(in), out_(out), s_(shape), weight_(weight), bias_(bias),
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

void Conv2dLayer::im2col(std::int64_t r0, std::int64_t r1, float* cols) const {
  const int H = in_->h, W = in_->w, IC = in_->c, OH = out_->h, OW = out_->w, K = s_.kernel;
  const std::size_t ic_bytes = static_cast<std::size_t>(IC) * sizeof(float);
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
    float* col = cols + static_cast<std::size_t>(r - r0) * patch_;
    for (int kh = 0; kh < K; ++kh) {
      const int ih = oh * s_.stride - s_.pad + kh;
      for (int kw = 0; kw < K; ++kw) {
        const int iw = ow * s_.stride - s_.pad + kw;
        float* dst = col + static_cast<std::size_t>(kh * K + kw) * IC;
        if (ih < 0 || ih >= H || iw < 0 || iw >= W) std::memset(dst, 0, ic_bytes);
        else std::memcpy(dst, in_->value + ((n * H + ih) * W + iw) * IC, ic_bytes);
      }
    }
  }
}

void Conv2dLayer::col2im(std::int64_t r0, std::int64_t r1, const float* dcols) const {
  const int H = in_->h, W = in_->w, IC = in_->c, OH = out_->h, OW = out_->w, K = s_.kernel;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
    const float* col = dcols + static_cast<std::size_t>(r - r0) * patch_;
    for (int kh = 0; kh < K; ++kh) {
      const int ih = oh * s_.stride - s_.pad + kh;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < K; ++kw) {
        const int iw = ow * s_.stride - s_.pad + kw;
        if (iw < 0 || iw >= W) continue;
        const float* src = col + static_cast<std::size_t>(kh * K + kw) * IC;
        float* dst = in_->grad + ((n * H + ih) * W + iw) * IC;
        for (int ic = 0; ic < IC; ++ic) dst[ic] += src[ic];
      }
    }
  }
}

void Conv2dLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  const float* cols = in_->value + static_cast<std::size_t>(r0) * in_->c;
  if (!pointwise_) {
    im2col(r0, r1, c.cols);
    cols = c.cols;
  }
  c.backend.matmul_forward(out_->value + static_cast<std::size_t>(r0) * out_->c, cols, weight_->value,
                           bias_ ? bias_->value : nullptr, static_cast<int>(r1 - r0), static_cast<int>(patch_),
                           out_->c, c.stream);
}

void Conv2dLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute& c) {
  const float* cols = in_->value + static_cast<std::size_t>(r0) * in_->c;
  if (!pointwise_) {
    im2col(r0, r1, c.cols);
    cols = c.cols;
  }
  const bool dx = in_->needs_grad;
  const int rows = static_cast<int>(r1 - r0);
  c.backend.matmul_backward(dx ? c.dcols : nullptr, weight_->grad, bias_ ? bias_->grad : nullptr,
                            out_->grad + static_cast<std::size_t>(r0) * out_->c, cols, weight_->value, rows,
                            static_cast<int>(patch_), out_->c, c.stream);
  if (!dx) return;
  if (!pointwise_) {
    col2im(r0, r1, c.dcols);
    return;
  }
  float* dst = in_->grad + static_cast<std::size_t>(r0) * in_->c;
  const std::size_t n = static_cast<std::size_t>(rows) * in_->c;
  for (std::size_t i = 0; i < n; ++i) dst[i] += c.dcols[i];
}

}  // namespace pipelane::cnn
