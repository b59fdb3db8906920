// Control-plane steps a checkpoint save and a resume take over the world: which ranks write the
// (pp, tp) shards, and rank 0's decision (a path, or the one-line error every rank then reports)
// broadcast back, so all ranks leave a save or a resume agreeing. Every rank's record of what it
// wrote reaches rank 0 through gather_to_root (control_plane.h).
#pragma once
#include <string>
#include <vector>

#include "parallel/control_plane.h"
#include "parallel/topology.h"

namespace pipelane {

// Rank 0's `text` on every rank (what the other ranks pass is ignored).
std::string broadcast_from_root(ControlPlane& plane, const std::string& text);

// The world ranks that write the shard of each (pp, tp) with dp rank 0, pp-major: entry
// pp * tp_size + tp. A dp replica holds the same tensors, so only dp rank 0 writes them.
std::vector<int> shard_writer_ranks(const Topology& topo);
inline bool writes_shard(const Topology& topo) { return topo.me.dp == 0; }

}  // namespace pipelane
