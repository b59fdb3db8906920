// torchvision's resnet18, resnet50 and vgg19 (layer shapes, parameter names, init schemes), at any
// batch, square image size and class count, with every channel count (and VGG's 4096-wide
// classifier) divided by width_divisor: 1 is torchvision's model; 8 makes one small enough for a
// PyTorch reference file. Batch norm in training mode; VGG-19 without batch norm, as torchvision's
// vgg19, with dropout p in its classifier.
#pragma once
#include <memory>
#include <string>

#include "lanes/builtin/cnn/cnn_network.h"

namespace pipelane::cnn {

struct CnnModelConfig {
  std::string arch = "resnet18";  // resnet18 | resnet50 | vgg19
  int batch = 8;
  int image_size = 64;  // square images, >= 32 (five halvings)
  int classes = 10;
  int width_divisor = 1;  // divides 64 (every width is a multiple of 64)
  float dropout = 0.5f;   // vgg19's classifier
  // torchvision's option (resnets): each residual block's last batch norm starts with weight 0, so
  // every block starts as the identity.
  bool zero_init_residual = false;
};

// Throws std::invalid_argument naming the field for an architecture or shape it cannot build.
std::unique_ptr<CnnNetwork> build_cnn(const CnnModelConfig& config);

}  // namespace pipelane::cnn
