#include "parallel/checkpoint_gather.h"

#include <cstdint>

namespace pipelane {

std::string broadcast_from_root(ControlPlane& plane, const std::string& text) {
  std::uint64_t len = plane.rank() == 0 ? text.size() : 0;
  plane.broadcast(&len, sizeof len, 0);
  std::string out = plane.rank() == 0 ? text : std::string(len, ' ');
  if (len > 0) plane.broadcast(out.data(), len, 0);
  return out;
}

std::vector<int> shard_writer_ranks(const Topology& topo) {
  const ParallelDims d = topo.grid.dims();
  std::vector<int> out;
  for (int p = 0; p < d.pp; ++p)
    for (int t = 0; t < d.tp; ++t) out.push_back(topo.grid.rank_of({t, 0, p}));
  return out;
}

}  // namespace pipelane
