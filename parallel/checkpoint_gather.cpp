#include "parallel/checkpoint_gather.h"

#include <cstdint>

namespace pipelane {

std::vector<std::string> gather_to_rank0(Communicator& world, const std::string& mine, int tag) {
  std::vector<std::string> out;
  if (world.rank() == 0) {
    out.push_back(mine);
    for (int r = 1; r < world.size(); ++r) {
      std::uint64_t len = 0;
      world.irecv(&len, sizeof len, r, tag)->wait();
      std::string buf(len, ' ');
      world.irecv(buf.data(), len, r, tag + 1)->wait();
      out.push_back(std::move(buf));
    }
  } else {
    const std::uint64_t len = mine.size();
    world.isend(&len, sizeof len, 0, tag)->wait();
    world.isend(mine.data(), len, 0, tag + 1)->wait();
  }
  return out;
}

std::string broadcast_from_rank0(Communicator& world, const std::string& text) {
  std::uint64_t len = world.rank() == 0 ? text.size() : 0;
  world.broadcast(&len, sizeof len, 0);
  std::string out = world.rank() == 0 ? text : std::string(len, ' ');
  if (len > 0) world.broadcast(out.data(), len, 0);
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
