// Data planes for a backend whose memory MPI cannot move (CUDA): NCCL communicators made by the
// CUDA backend library (runtime/backend_registry.h, DeviceComm), laid out by device_comm_plan.h.
// - collective planes (tp, dp, the tied embedding): one communicator each; collectives run on the
//   stream they are given (the training stream for tensor parallelism, so they keep its order;
//   the communication stream for the data-parallel buckets);
// - pipeline planes (pp_forward, pp_backward): a two-rank link per peer and direction, each with
//   its own stream: the link's stream waits (event) for the stream the transfer was issued on,
//   the NCCL call runs there, and the returned event completes with it;
// - groups of one: nothing to move (all-gather is a device copy).
// The unique ids come from world rank 0 and travel over the MPI control plane.
#pragma once
#include "parallel/topology.h"
#include "runtime/backend_registry.h"

namespace pipelane {

// This rank's device planes (collective over MPI_COMM_WORLD: every rank calls it). Throws
// std::runtime_error with one line when the communicators cannot be made (no GPU, NCCL refused).
void install_device_planes(Topology& topo, Backend& backend, int device);

// Planes of one process (every group of size one) for device memory.
void install_device_self_planes(Topology& topo, Backend& backend);

// This process's index among the ranks on its host (MPI_COMM_TYPE_SHARED): the GPU it takes when
// the config says `cuda` without an index. 0 outside MPI.
int local_rank_on_this_host();

}  // namespace pipelane
