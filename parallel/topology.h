// This rank's place in the grid and a communication plane for every group it belongs to. Built
// once (from MPI_COMM_WORLD with MPI_Comm_split, as threads of one process for tests, or as a
// single process) and passed down; nothing in pipelane reaches for a global communicator.
#pragma once
#include <memory>

#include "parallel/communicator.h"
#include "parallel/rank_grid.h"

namespace pipelane {

struct Topology {
  RankGrid grid{ParallelDims{}};
  int world_rank = 0;
  RankCoords me;
  std::unique_ptr<ControlPlane> world;  // every rank: barriers, scalar reductions, gathers
  std::unique_ptr<DataPlane> tp;        // same dp, pp; ordered by tp
  std::unique_ptr<DataPlane> dp;        // same tp, pp; ordered by dp
  // Same tp, dp; ordered by pp: point-to-point between stages, one plane per direction so that
  // activations (forward) and gradients (backward) each keep their own issue order.
  std::unique_ptr<DataPlane> pp_forward;
  std::unique_ptr<DataPlane> pp_backward;
  // First and last pipeline stage of the same (tp, dp): the tied embedding's gradient is summed
  // here. Null on middle stages and when pp == 1.
  std::unique_ptr<DataPlane> embedding;

  bool first_stage() const { return me.pp == 0; }
  bool last_stage() const { return me.pp == grid.dims().pp - 1; }

  // One process, every group of size one.
  static Topology single_process();
  // From MPI_COMM_WORLD; throws std::invalid_argument unless its size is tp * dp * pp.
  static Topology from_mpi_world(ParallelDims dims);
};

}  // namespace pipelane
