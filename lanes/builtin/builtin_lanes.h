// Factories of the lanes that ship with pipelane, by name.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "lanes/lane.h"

namespace pipelane {

using LaneFactory = std::function<std::unique_ptr<Lane>()>;

// name -> factory for every built-in lane (pagerank, imageproc, smalltrain, prefill, command).
std::map<std::string, LaneFactory> builtin_lane_factories();

}  // namespace pipelane
