// Small gathers over the world communicator for what rank 0 reports or uses alone (trace events,
// lane summaries, the model for training samples).
#pragma once
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace pipelane {

// Every rank's bytes on rank 0, in rank order; other ranks get an empty vector. Collective: every
// rank calls it with the same tags (two consecutive tags are used).
std::vector<std::string> gather_on_rank0(Communicator& world, const std::string& mine, int tag);

}  // namespace pipelane
