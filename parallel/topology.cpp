#include "parallel/topology.h"

#include <mpi.h>

#include <stdexcept>
#include <string>

#include "parallel/mpi_communicator.h"

namespace pipelane {

Topology Topology::single_process() {
  Topology t;
  t.world = make_self_control_plane();
  t.tp = make_self_data_plane();
  t.dp = make_self_data_plane();
  t.pp_forward = make_self_data_plane();
  t.pp_backward = make_self_data_plane();
  return t;
}

namespace {
// MPI_Comm_split, or MPI_COMM_NULL for ranks that pass MPI_UNDEFINED (freed by the caller).
MPI_Comm split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, key, &sub);
  return sub;
}
std::unique_ptr<DataPlane> data_plane(int color, int key) {
  MPI_Comm sub = split(color, key);
  if (sub == MPI_COMM_NULL) return nullptr;
  auto plane = make_mpi_data_plane(sub);  // duplicates
  MPI_Comm_free(&sub);
  return plane;
}
}  // namespace

Topology Topology::from_mpi_world(ParallelDims dims) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != dims.world())
    throw std::invalid_argument("world size " + std::to_string(size) + " is not tp x dp x pp = " +
                                std::to_string(dims.tp) + " x " + std::to_string(dims.dp) + " x " +
                                std::to_string(dims.pp) + " = " + std::to_string(dims.world()));
  Topology t;
  t.grid = RankGrid(dims);
  t.world_rank = rank;
  t.me = t.grid.coords(rank);
  const RankCoords c = t.me;
  t.world = make_mpi_control_plane(MPI_COMM_WORLD);
  // Every rank takes part in every split (MPI_Comm_split is collective), in the same order.
  t.tp = data_plane(c.dp + dims.dp * c.pp, c.tp);
  t.dp = data_plane(c.tp + dims.tp * c.pp, c.dp);
  t.pp_forward = data_plane(c.tp + dims.tp * c.dp, c.pp);
  t.pp_backward = data_plane(c.tp + dims.tp * c.dp, c.pp);
  const bool ends = dims.pp > 1 && (c.pp == 0 || c.pp == dims.pp - 1);
  t.embedding = data_plane(ends ? c.tp + dims.tp * c.dp : MPI_UNDEFINED, c.pp);
  return t;
}

}  // namespace pipelane
