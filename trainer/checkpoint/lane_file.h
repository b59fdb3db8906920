// The lane file of one world rank (lanes_rankNNNN.bin): the lane names configured on that rank and
// each lane's saved progress (Lane::save(), opaque bytes). Dp replicas run their own lanes, so lane
// state is per world rank, not per (pp, tp) shard. Layout (integers little-endian):
//   "PLLANES1"   8-byte magic
//   u32 count, then count x (u32 length + bytes): the lane names configured on the rank, in order
//   u32 count, then count x (u32 name length + name, u64 state length + state): Lane::save() of
//                every lane that was set up and not quarantined (GapScheduler::save_lanes())
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <map>
#include <string>
#include <vector>

#include "trainer/checkpoint/manifest.h"

namespace pipelane {

// One rank's lanes: the lane names configured on it (in order) and lane name -> Lane::save().
struct LaneStates {
  std::vector<std::string> lanes;
  std::map<std::string, std::string> states;
};

std::string encode_lane_states(const LaneStates& lanes);
LaneStates decode_lane_states(const std::string& bytes);  // CheckpointError when malformed

// Writes DIR/lanes_rankNNNN.bin (fsync'd) and describes it for the manifest. On failure the
// partial file is removed and CheckpointError names the file and the system's reason.
LaneFileRecord write_lane_file(const std::string& dir, int world_rank, const LaneStates& lanes);
// Reads the file `record` names inside `dir`, checks its size and CRC against the record and
// decodes it; CheckpointError naming the file otherwise.
LaneStates read_lane_file(const std::string& dir, const LaneFileRecord& record);

}  // namespace pipelane
