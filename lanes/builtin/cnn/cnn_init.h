// Initial values of the CNN lanes' parameters: torchvision's schemes (kaiming_normal_ fan_out for
// convolutions, nn.Linear's default for ResNet's fc, N(0, 0.01) for VGG's classifier, batch norm
// 1 and 0), each drawn *uniform with the scheme's standard deviation* from cnn_random.h. Uniform,
// because a uniform draw from 24 random bits is exact in float and double, so the PyTorch reference
// (tests/golden/cnn_reference.py) starts from the same bits; a normal draw would go through log and
// cos, whose last bits differ between libraries. The variance, which is what the schemes are for,
// is the same.
#pragma once
#include <cstdint>

#include "lanes/builtin/cnn/cnn_tensors.h"

namespace pipelane::cnn {

// The value of element i (torch layout) of `param` under `seed`.
float initial_value(const CnnParam& param, std::uint64_t seed, std::size_t i);
// All of it, in our layout, into `host` (param.size() floats).
void initial_values(const CnnParam& param, std::uint64_t seed, float* host);

}  // namespace pipelane::cnn
