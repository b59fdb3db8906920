#include "lanes/builtin/cnn/pooling_layers.h"

#include <stdexcept>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {

MaxPoolLayer::MaxPoolLayer(std::string name, Feature* in, Feature* out, int kernel, int stride, int pad)
    : name_(std::move(name)), in_(in), out_(out), kernel_(kernel), stride_(stride), pad_(pad) {
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

void MaxPoolLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  const int H = in_->h, W = in_->w, C = in_->c, OH = out_->h, OW = out_->w;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
    // The window's valid cells, then every channel over them with selects rather than branches
    // (random data: branches mispredict); strictly greater keeps the first maximum.
    std::int64_t cells[64];
    int count = 0;
    for (int kh = 0; kh < kernel_; ++kh) {
      const int ih = oh * stride_ - pad_ + kh;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < kernel_; ++kw) {
        const int iw = ow * stride_ - pad_ + kw;
        if (iw >= 0 && iw < W) cells[count++] = ((n * H + ih) * W + iw) * C;
      }
    }
    for (int c = 0; c < C; ++c) {
      std::int64_t best = cells[0] + c;
      float best_value = in_->value[best];
      for (int k = 1; k < count; ++k) {
        const std::int64_t at = cells[k] + c;
        const bool greater = in_->value[at] > best_value;
        best_value = greater ? in_->value[at] : best_value;
        best = greater ? at : best;
      }
      out_->value[r * C + c] = best_value;
      argmax_[r * C + c] = best;
    }
  }
}

void MaxPoolLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  const int C = out_->c;
  for (std::int64_t i = r0 * C; i < r1 * C; ++i) in_->grad[argmax_[i]] += out_->grad[i];
}

AdaptiveAvgPoolLayer::AdaptiveAvgPoolLayer(std::string name, Feature* in, Feature* out)
    : name_(std::move(name)), in_(in), out_(out) {
  if (out->n != in->n || out->c != in->c) throw std::logic_error("AdaptiveAvgPoolLayer " + name_ + ": shapes do not agree");
}

AdaptiveAvgPoolLayer::Window AdaptiveAvgPoolLayer::window(std::int64_t r) const {
  const int OH = out_->h, OW = out_->w, H = in_->h, W = in_->w;
  const int oh = static_cast<int>(r / OW % OH), ow = static_cast<int>(r % OW);
  return {oh * H / OH, ((oh + 1) * H + OH - 1) / OH, ow * W / OW, ((ow + 1) * W + OW - 1) / OW};
}

std::vector<LayerPhase> AdaptiveAvgPoolLayer::forward_phases() const {
  const double cells = static_cast<double>((in_->h + out_->h - 1) / out_->h + 1) * ((in_->w + out_->w - 1) / out_->w + 1);
  return {{out_->rows(), kElementCost * out_->c * cells}};
}
std::vector<LayerPhase> AdaptiveAvgPoolLayer::backward_phases() const { return forward_phases(); }

void AdaptiveAvgPoolLayer::forward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  const int H = in_->h, W = in_->w, C = in_->c, OH = out_->h, OW = out_->w;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const Window win = window(r);
    const float count = static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
    float* o = out_->value + r * C;
    for (int c = 0; c < C; ++c) o[c] = 0;
    for (int ih = win.h0; ih < win.h1; ++ih)
      for (int iw = win.w0; iw < win.w1; ++iw) {
        const float* x = in_->value + ((n * H + ih) * W + iw) * C;
        for (int c = 0; c < C; ++c) o[c] += x[c];
      }
    for (int c = 0; c < C; ++c) o[c] /= count;
  }
}

void AdaptiveAvgPoolLayer::backward(int, std::int64_t r0, std::int64_t r1, CnnCompute&) {
  const int H = in_->h, W = in_->w, C = in_->c, OH = out_->h, OW = out_->w;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / (static_cast<std::int64_t>(OH) * OW);
    const Window win = window(r);
    const float count = static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
    const float* g = out_->grad + r * C;
    for (int ih = win.h0; ih < win.h1; ++ih)
      for (int iw = win.w0; iw < win.w1; ++iw) {
        float* dx = in_->grad + ((n * H + ih) * W + iw) * C;
        for (int c = 0; c < C; ++c) dx[c] += g[c] / count;
      }
  }
}

}  // namespace pipelane::cnn
