// Control-plane collectives a checkpoint save and a resume run over the world communicator:
// which ranks write the (pp, tp) shards, the gather of every rank's record of what it wrote to
// rank 0 (which writes the manifest), and rank 0's decision (a path, or the one-line error every
// rank then reports) broadcast back, so all ranks leave a save or a resume agreeing.
#pragma once
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace pipelane {

// Every rank's string on rank 0, in world-rank order; other ranks get an empty vector. `tag` and
// tag + 1 are used for the transfers.
std::vector<std::string> gather_to_rank0(Communicator& world, const std::string& mine, int tag);
// Rank 0's `text` on every rank (what the other ranks pass is ignored).
std::string broadcast_from_rank0(Communicator& world, const std::string& text);

// The world ranks that write the shard of each (pp, tp) with dp rank 0, pp-major: entry
// pp * tp_size + tp. A dp replica holds the same tensors, so only dp rank 0 writes them.
std::vector<int> shard_writer_ranks(const Topology& topo);
inline bool writes_shard(const Topology& topo) { return topo.me.dp == 0; }

}  // namespace pipelane
