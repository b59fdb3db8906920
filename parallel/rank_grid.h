// The rank grid: world = tp x dp x pp with tp varying fastest (neighbouring ranks share a
// tensor-parallel group, which keeps its all-reduces inside a host), then dp, then pp. Pure
// arithmetic, testable without MPI; Topology builds communicators from it.
#pragma once
#include <string>

namespace pipelane {

struct ParallelDims {
  int tp = 1, dp = 1, pp = 1;
  int world() const { return tp * dp * pp; }
};

struct RankCoords {
  int tp = 0, dp = 0, pp = 0;
};

class RankGrid {
 public:
  explicit RankGrid(ParallelDims dims) : dims_(dims) {}
  const ParallelDims& dims() const { return dims_; }
  RankCoords coords(int world_rank) const {
    return {world_rank % dims_.tp, (world_rank / dims_.tp) % dims_.dp,
            world_rank / (dims_.tp * dims_.dp)};
  }
  int rank_of(RankCoords c) const { return c.tp + dims_.tp * (c.dp + dims_.dp * c.pp); }
  // "tp 1/2, dp 0/1, pp 1/2" for messages.
  std::string describe(int world_rank) const;

 private:
  ParallelDims dims_;
};

}  // namespace pipelane
