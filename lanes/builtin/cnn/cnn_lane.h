// The CNN training lanes: resnet18, resnet50 and vgg19 (FreeRide's CNN side tasks), each training
// torchvision's model inside the bubbles through the Backend (the CPU's, or a GPU's: the lane
// runs_on_device): forward, cross-entropy, backward, SGD with momentum, batch norm in training
// mode. README.md in this folder has the options, the design and
// how it is checked.
#pragma once
#include <memory>
#include <string>

#include "lanes/lane.h"

namespace pipelane {

// arch: resnet18, resnet50 or vgg19 (also the lane's name).
std::unique_ptr<Lane> make_cnn_lane(const std::string& arch);

}  // namespace pipelane
