#include "trainer/rank_gather.h"

#include <cstdint>

namespace pipelane {

std::vector<std::string> gather_on_rank0(Communicator& world, const std::string& mine, int tag) {
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

}  // namespace pipelane
