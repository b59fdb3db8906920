#include "lanes/builtin/cnn/cnn_random.h"

namespace pipelane::cnn {

std::uint64_t name_key(const std::string& name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

}  // namespace pipelane::cnn
