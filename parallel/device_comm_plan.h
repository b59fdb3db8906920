// Which device communicators (NCCL) a tp x dp x pp job needs, as plain data: a collective one per
// tensor-parallel, data-parallel and tied-embedding group, and for pipeline transfers one
// two-rank LINK per (sender, receiver, direction), as runtime/cuda/README.md explains: NCCL pairs
// sends with receives by order and a call holds its stream until its partner runs, so every link
// gets a communicator and a stream of its own (with one stream per rank the interleaved schedule
// deadlocks). Pure arithmetic on the rank grid: tested without MPI or a GPU.
#pragma once
#include <vector>

#include "parallel/rank_grid.h"

namespace pipelane {

struct DeviceCommGroup {
  enum class Kind { TensorParallel, DataParallel, Embedding, ForwardLink, BackwardLink };
  Kind kind;
  std::vector<int> members;  // world ranks in communicator-rank order (a link: sender, receiver)
};

// Every communicator of the job with more than one member, in an order every rank computes the
// same way (so world rank 0 can hand out one unique id per entry).
std::vector<DeviceCommGroup> device_comm_plan(ParallelDims dims);

// The entries `world_rank` is a member of, as indices into the plan.
std::vector<int> device_comms_of(const std::vector<DeviceCommGroup>& plan, int world_rank);

}  // namespace pipelane
