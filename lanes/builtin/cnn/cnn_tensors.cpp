#include "lanes/builtin/cnn/cnn_tensors.h"

namespace pipelane::cnn {

std::size_t CnnParam::size() const {
  std::size_t n = 1;
  for (int d : torch_shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::size_t CnnParam::index_of_torch(std::size_t i) const {
  const std::size_t C = static_cast<std::size_t>(channels), S = static_cast<std::size_t>(spatial);
  const std::size_t outer = i / (C * S), c = i / S % C, s = i % S;
  return (outer * S + s) * C + c;
}

std::size_t BufferPlan::bytes(std::size_t alignment) const {
  std::size_t total = 0;
  for (const Request& r : requests_) total += align_up(r.bytes, alignment);
  return total;
}

void BufferPlan::allocate(Arena& arena) const {
  for (const Request& r : requests_) *r.slot = arena.allocate(r.bytes, r.what);
}

}  // namespace pipelane::cnn
