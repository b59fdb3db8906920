#pragma once
#include <string>

namespace pipelane {
// "no device (...)" without a driver or GPU; otherwise the device count and the first one's name.
// Defined only when the CUDA backend is built (PIPELANE_HAVE_CUDA).
std::string cuda_device_report();
}  // namespace pipelane
