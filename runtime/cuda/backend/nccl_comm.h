// NCCL behind the registry's DeviceComm (runtime/backend_registry.h): one communicator, its calls
// on the caller's stream. The library's entry points (backend_entry.cpp) create a rank's
// communicators all at once.
#pragma once
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend_registry.h"

namespace pipelane::cuda {

struct NcclCommSpec {
  ncclUniqueId id;
  int size, rank;
};

// All in one ncclGroupStart/ncclGroupEnd on `device`; std::runtime_error with NCCL's message (and
// nothing left behind) when any of them fails.
std::vector<std::unique_ptr<DeviceComm>> create_nccl_comms(const std::vector<NcclCommSpec>& specs, int device);

}  // namespace pipelane::cuda
