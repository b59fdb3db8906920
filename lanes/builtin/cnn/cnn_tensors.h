// What the CNN lanes compute on: NHWC activations (one row per pixel, channels contiguous, so a
// convolution is im2col + one GEMM in nn.Linear's layout), the parameters they train (kept in
// torchvision's names and shapes, stored channels last) and the plan that places every buffer in
// the lane's arena.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/arena.h"

namespace pipelane::cnn {

// Activations [n, h, w, c]. grad is null for a tensor nothing differentiates (the images).
struct Feature {
  std::string name;
  int n = 0, h = 0, w = 0, c = 0;
  bool needs_grad = true;
  float* value = nullptr;
  float* grad = nullptr;
  std::int64_t rows() const { return static_cast<std::int64_t>(n) * h * w; }
  std::size_t size() const { return static_cast<std::size_t>(rows()) * c; }
};

// How a parameter starts: torchvision's schemes, each drawn uniform with the scheme's variance
// (cnn_init.h says why uniform).
enum class ParamInit {
  ConvKaimingFanOut,  // ResNet and VGG convolutions: std sqrt(2 / fan_out)
  LinearDefault,      // nn.Linear's default (ResNet's fc), weight and bias: U(-1/sqrt(fan_in), +)
  VggLinear,          // VGG's classifier: std 0.01, bias 0
  Ones,
  Zeros,
};

// A trained tensor. torch's layout [outer][channels][spatial] is stored [outer][spatial][channels]
// (a conv weight [OC][IC][KH][KW] as [OC][KH][KW][IC], a Linear after a flatten of NCHW as NHWC);
// plain tensors have channels = spatial = 1.
struct CnnParam {
  std::string name;  // torchvision's: "layer1.0.conv1.weight"
  std::vector<int> torch_shape;
  int channels = 1, spatial = 1;
  ParamInit init = ParamInit::Zeros;
  int fan = 1;  // fan_out (convolutions) or fan_in (linear layers)
  float* value = nullptr;
  float* grad = nullptr;
  float* momentum = nullptr;
  std::size_t size() const;
  // Where element i of the torch-layout tensor lives in ours.
  std::size_t index_of_torch(std::size_t i) const;
};

// Batch norm's running statistics: not trained, updated once per step, saved.
struct CnnBuffer {
  std::string name;  // "bn1.running_mean"
  std::size_t size = 0;
  float initial = 0;
  float* value = nullptr;
};

// Every buffer the network needs, requested before any is placed: the total is known (and checked
// against the arena's free bytes, with a message naming it) before the first allocation.
class BufferPlan {
 public:
  template <typename T>
  void add(T** slot, std::size_t count, const char* what) {
    requests_.push_back({reinterpret_cast<void**>(slot), count * sizeof(T), what});
  }
  std::size_t bytes(std::size_t alignment) const;  // as an arena of that alignment places them
  void allocate(Arena& arena) const;

 private:
  struct Request {
    void** slot;
    std::size_t bytes;
    const char* what;
  };
  std::vector<Request> requests_;
};

}  // namespace pipelane::cnn
