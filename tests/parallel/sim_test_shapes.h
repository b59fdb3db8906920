// What the simulator's tests (test_sim*.cpp) build their jobs from: a small GPT (8 layers of d 128,
// 4 heads, context 64, 256 tokens) and a cluster of one node.
#pragma once
#include <string>

#include "parallel/sim/cluster.h"
#include "parallel/sim/hardware.h"
#include "model/gpt_config.h"

namespace pipelane::sim::test_shapes {

inline GptConfig small_gpt() {
  GptConfig c;
  c.layers = 8;
  c.d_model = 128;
  c.heads = 4;
  c.max_seq_len = 64;
  c.vocab_size = 256;
  return c;
}

// `devices` of `device` (builtin_device's names) joined by `link`.
inline Cluster one_node(int devices, const std::string& device, const LinkSpec& link) {
  Cluster c;
  c.name = "test";
  c.device = *builtin_device(device);
  c.devices_per_node = devices;
  c.sites = {Site{"site", 1, {}}};
  c.intra_node = link;
  return c;
}

}  // namespace pipelane::sim::test_shapes
