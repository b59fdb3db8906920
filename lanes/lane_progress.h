// A stage's lanes' progress across a restart: every lane's Lane::save() for a checkpoint, and
// Lane::load() of saved states when resuming. A lane that fails either is quarantined.
#pragma once
#include <map>
#include <string>

#include "lanes/lane_slot.h"

namespace pipelane {

// Lane name -> Lane::save() of every lane that was set up and is not quarantined, after the
// steps posted before it (a checkpoint holds every one of them).
std::map<std::string, std::string> save_lane_progress(LaneSlots& slots, const LaneLogger& logger);

// Lane::load() for each lane named in `states`, setting lanes up first if needed (not once the
// scheduler is torn down); states of lanes not running here are ignored (said).
void load_lane_progress(LaneSlots& slots, const std::map<std::string, std::string>& states, bool torn_down,
                        const LaneLogger& logger);

}  // namespace pipelane
