#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/bfs_lane.h"
#include "lanes/builtin/cnn/cnn_lane.h"
#include "lanes/builtin/command_lane.h"
#include "lanes/builtin/graphsgd_lane.h"
#include "lanes/builtin/imageproc_lane.h"
#include "lanes/builtin/jpegimage_lane.h"
#include "lanes/builtin/pagerank_lane.h"
#include "lanes/builtin/prefill_lane.h"
#include "lanes/builtin/smalltrain_lane.h"
#include "lanes/builtin/synthetic_lane.h"

// Each built-in declares its factory in its own header; one line each below.

namespace pipelane {

std::map<std::string, LaneFactory> builtin_lane_factories() {
  std::map<std::string, LaneFactory> f;
  // BUILTIN LANES (one line each): f["name"] = [] { return make_xxx_lane(); };
  f["smalltrain"] = [] { return make_smalltrain_lane(); };
  f["prefill"] = [] { return make_prefill_lane(); };
  f["pagerank"] = [] { return make_pagerank_lane(); };
  f["graphsgd"] = [] { return make_graphsgd_lane(); };
  f["bfs"] = [] { return make_bfs_lane(); };
  f["imageproc"] = [] { return make_imageproc_lane(); };
  f["jpegimage"] = [] { return make_jpegimage_lane(); };
  f["command"] = [] { return make_command_lane(); };
  f["synthetic"] = [] { return make_synthetic_lane(); };
  for (const char* arch : {"resnet18", "resnet50", "vgg19"}) f[arch] = [arch] { return make_cnn_lane(arch); };
  return f;
}

}  // namespace pipelane
