// Both communication planes: the control plane (host coordination, MPI) and the stream-ordered
// data plane (training tensors; MPI or NCCL). See control_plane.h and data_plane.h.
#pragma once
#include "parallel/control_plane.h"
#include "parallel/data_plane.h"

namespace pipelane {

// A group of one: collectives are identities, point-to-point is an error.
std::unique_ptr<ControlPlane> make_self_control_plane();
std::unique_ptr<DataPlane> make_self_data_plane();

}  // namespace pipelane
