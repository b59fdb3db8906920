#include "lanes/builtin/cnn/cnn_models.h"

#include <stdexcept>

#include "lanes/builtin/cnn/batch_norm_layer.h"
#include "lanes/builtin/cnn/conv2d_layer.h"
#include "lanes/builtin/cnn/linear_layer.h"
#include "lanes/builtin/cnn/pointwise_layers.h"
#include "lanes/builtin/cnn/pooling_layers.h"

namespace pipelane::cnn {
namespace {

// Adds layers to a network by torchvision's module names.
class Builder {
 public:
  explicit Builder(CnnNetwork& net) : net_(net) {}

  Feature* conv(const std::string& name, Feature* x, int oc, ConvShape s, bool bias = false) {
    const int oh = Conv2dLayer::output_size(x->h, s), ow = Conv2dLayer::output_size(x->w, s);
    if (oh < 1 || ow < 1) throw std::invalid_argument(name + ": the image is too small for this model");
    Feature* out = net_.add_feature(name, x->n, oh, ow, oc);
    CnnParam* w = net_.add_param(name + ".weight", {oc, x->c, s.kernel, s.kernel}, ParamInit::ConvKaimingFanOut,
                                 oc * s.kernel * s.kernel, x->c, s.kernel * s.kernel);
    CnnParam* b = bias ? net_.add_param(name + ".bias", {oc}, ParamInit::Zeros, 1) : nullptr;
    net_.add_layer(std::make_unique<Conv2dLayer>(name, x, out, s, w, b));
    return out;
  }

  Feature* batch_norm(const std::string& name, Feature* x, bool zero_weight = false) {
    Feature* out = net_.add_feature(name, x->n, x->h, x->w, x->c);
    CnnParam* w = net_.add_param(name + ".weight", {x->c}, zero_weight ? ParamInit::Zeros : ParamInit::Ones, 1);
    CnnParam* b = net_.add_param(name + ".bias", {x->c}, ParamInit::Zeros, 1);
    CnnBuffer* mean = net_.add_buffer(name + ".running_mean", static_cast<std::size_t>(x->c), 0.0f);
    CnnBuffer* var = net_.add_buffer(name + ".running_var", static_cast<std::size_t>(x->c), 1.0f);
    net_.add_layer(std::make_unique<BatchNormLayer>(name, x, out, w, b, mean, var));
    return out;
  }

  Feature* relu(const std::string& name, Feature* x) {
    net_.add_layer(std::make_unique<ReluLayer>(name, x));
    return x;
  }

  Feature* max_pool(const std::string& name, Feature* x, int kernel, int stride, int pad) {
    const int oh = MaxPoolLayer::output_size(x->h, kernel, stride, pad);
    const int ow = MaxPoolLayer::output_size(x->w, kernel, stride, pad);
    if (oh < 1 || ow < 1) throw std::invalid_argument(name + ": the image is too small for this model");
    Feature* out = net_.add_feature(name, x->n, oh, ow, x->c);
    net_.add_layer(std::make_unique<MaxPoolLayer>(name, x, out, kernel, stride, pad));
    return out;
  }

  Feature* adaptive_avg_pool(const std::string& name, Feature* x, int side) {
    Feature* out = net_.add_feature(name, x->n, side, side, x->c);
    net_.add_layer(std::make_unique<AdaptiveAvgPoolLayer>(name, x, out));
    return out;
  }

  Feature* linear(const std::string& name, Feature* x, int out_features, ParamInit init) {
    const int in_features = x->h * x->w * x->c;
    Feature* out = net_.add_feature(name, x->n, 1, 1, out_features);
    CnnParam* w = net_.add_param(name + ".weight", {out_features, in_features}, init, in_features, x->c, x->h * x->w);
    CnnParam* b = net_.add_param(name + ".bias", {out_features},
                                 init == ParamInit::LinearDefault ? ParamInit::LinearDefault : ParamInit::Zeros,
                                 in_features);
    net_.add_layer(std::make_unique<LinearLayer>(name, x, out, w, b));
    return out;
  }

  Feature* add(const std::string& name, Feature* a, Feature* b) {
    Feature* out = net_.add_feature(name, a->n, a->h, a->w, a->c);
    net_.add_layer(std::make_unique<ResidualAddLayer>(name, a, b, out));
    return out;
  }

  Feature* dropout(const std::string& name, Feature* x, float p) {
    if (p > 0) net_.add_layer(std::make_unique<DropoutLayer>(name, x, p));
    return x;
  }

 private:
  CnnNetwork& net_;
};

// torchvision's BasicBlock (expansion 1) and Bottleneck (expansion 4, stride on the 3x3: "v1.5").
Feature* residual_block(Builder& b, const std::string& p, Feature* x, int planes, int stride, bool bottleneck,
                        bool zero_init) {
  const int expansion = bottleneck ? 4 : 1;
  Feature* o = x;
  if (bottleneck) {
    o = b.relu(p + ".relu1", b.batch_norm(p + ".bn1", b.conv(p + ".conv1", x, planes, {1, 1, 0})));
    o = b.relu(p + ".relu2", b.batch_norm(p + ".bn2", b.conv(p + ".conv2", o, planes, {3, stride, 1})));
    o = b.batch_norm(p + ".bn3", b.conv(p + ".conv3", o, planes * expansion, {1, 1, 0}), zero_init);
  } else {
    o = b.relu(p + ".relu1", b.batch_norm(p + ".bn1", b.conv(p + ".conv1", x, planes, {3, stride, 1})));
    o = b.batch_norm(p + ".bn2", b.conv(p + ".conv2", o, planes, {3, 1, 1}), zero_init);
  }
  Feature* identity = x;
  if (stride != 1 || x->c != planes * expansion)
    identity = b.batch_norm(p + ".downsample.1", b.conv(p + ".downsample.0", x, planes * expansion, {1, stride, 0}));
  return b.relu(p + ".relu", b.add(p + ".add", o, identity));
}

void build_resnet(Builder& b, CnnNetwork& net, const CnnModelConfig& c, const int (&blocks)[4], bool bottleneck) {
  const int d = c.width_divisor;
  Feature* x = b.relu("relu", b.batch_norm("bn1", b.conv("conv1", net.input, 64 / d, {7, 2, 3})));
  x = b.max_pool("maxpool", x, 3, 2, 1);
  for (int layer = 0; layer < 4; ++layer)
    for (int block = 0; block < blocks[layer]; ++block)
      x = residual_block(b, "layer" + std::to_string(layer + 1) + "." + std::to_string(block), x, (64 << layer) / d,
                         layer > 0 && block == 0 ? 2 : 1, bottleneck, c.zero_init_residual);
  net.logits = b.linear("fc", b.adaptive_avg_pool("avgpool", x, 1), c.classes, ParamInit::LinearDefault);
}

void build_vgg19(Builder& b, CnnNetwork& net, const CnnModelConfig& c) {
  constexpr int kMaxPool = 0;
  const int cfg[] = {64, 64, kMaxPool, 128, 128, kMaxPool, 256, 256, 256, 256, kMaxPool,
                     512, 512, 512, 512, kMaxPool, 512, 512, 512, 512, kMaxPool};
  const int d = c.width_divisor;
  Feature* x = net.input;
  int index = 0;  // torchvision's nn.Sequential index: every conv, relu and pool takes one
  for (int width : cfg) {
    const std::string name = "features." + std::to_string(index);
    if (width == kMaxPool) {
      x = b.max_pool(name, x, 2, 2, 0);
      index += 1;
    } else {
      x = b.relu("features." + std::to_string(index + 1), b.conv(name, x, width / d, {3, 1, 1}, true));
      index += 2;
    }
  }
  x = b.adaptive_avg_pool("avgpool", x, 7);
  const int hidden = 4096 / d;
  x = b.dropout("classifier.2", b.relu("classifier.1", b.linear("classifier.0", x, hidden, ParamInit::VggLinear)),
                c.dropout);
  x = b.dropout("classifier.5", b.relu("classifier.4", b.linear("classifier.3", x, hidden, ParamInit::VggLinear)),
                c.dropout);
  net.logits = b.linear("classifier.6", x, c.classes, ParamInit::VggLinear);
}

}  // namespace

std::unique_ptr<CnnNetwork> build_cnn(const CnnModelConfig& c) {
  if (c.width_divisor < 1 || 64 % c.width_divisor != 0)
    throw std::invalid_argument("width_divisor = " + std::to_string(c.width_divisor) + ": expected a divisor of 64");
  if (c.image_size < 32) throw std::invalid_argument("image_size = " + std::to_string(c.image_size) + ": expected >= 32");
  if (c.batch < 1 || c.classes < 1) throw std::invalid_argument("batch and classes must be >= 1");
  auto net = std::make_unique<CnnNetwork>();
  net->input = net->add_feature("input", c.batch, c.image_size, c.image_size, 3, false);
  Builder b(*net);
  if (c.arch == "resnet18") build_resnet(b, *net, c, {2, 2, 2, 2}, false);
  else if (c.arch == "resnet50") build_resnet(b, *net, c, {3, 4, 6, 3}, true);
  else if (c.arch == "vgg19") build_vgg19(b, *net, c);
  else throw std::invalid_argument("arch = '" + c.arch + "': expected resnet18, resnet50 or vgg19");
  return net;
}

}  // namespace pipelane::cnn
