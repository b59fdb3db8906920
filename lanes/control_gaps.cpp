#include "lanes/control_gaps.h"

#include <cstdint>

namespace pipelane {
namespace {

// splitmix64's finaliser: every input bit reaches every output bit, so consecutive iterations and
// gap ids give unrelated values.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

bool is_control_gap(int iteration, int gap_id, int stage, int control_every) {
  if (control_every <= 0) return false;
  const std::uint64_t key = mix(mix(mix(static_cast<std::uint32_t>(stage)) ^ static_cast<std::uint32_t>(iteration)) ^
                                static_cast<std::uint32_t>(gap_id));
  return key % static_cast<std::uint64_t>(control_every) == 0;
}

}  // namespace pipelane
