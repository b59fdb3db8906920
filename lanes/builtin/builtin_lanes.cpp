#include "lanes/builtin/builtin_lanes.h"

// Each built-in declares its factory in its own header; one line each below.

namespace pipelane {

std::map<std::string, LaneFactory> builtin_lane_factories() {
  std::map<std::string, LaneFactory> f;
  // BUILTIN LANES (one line each): f["name"] = [] { return make_xxx_lane(); };
  return f;
}

}  // namespace pipelane
