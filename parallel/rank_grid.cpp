#include "parallel/rank_grid.h"

namespace pipelane {

std::string RankGrid::describe(int world_rank) const {
  const RankCoords c = coords(world_rank);
  return "rank " + std::to_string(world_rank) + " (tp " + std::to_string(c.tp) + "/" +
         std::to_string(dims_.tp) + ", dp " + std::to_string(c.dp) + "/" + std::to_string(dims_.dp) +
         ", pp " + std::to_string(c.pp) + "/" + std::to_string(dims_.pp) + ")";
}

}  // namespace pipelane
