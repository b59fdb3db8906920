#include "lanes/lane_progress.h"

#include <algorithm>

namespace pipelane {

std::map<std::string, std::string> save_lane_progress(LaneSlots& slots, const LaneLogger& logger) {
  std::map<std::string, std::string> states;
  for (auto& owned : slots) {
    LaneSlot& slot = *owned;
    if (!slot.set_up || slot.stats.quarantined) continue;
    slot.quiesce();  // a checkpoint holds every step posted before it
    try {
      std::string state = slot.lane->save();
      // A worker's frame is bounded by it already; a thread lane's state is checked here.
      if (slot.limits.state_bytes > 0 && state.size() > slot.limits.state_bytes)
        throw LaneError("save() returned " + std::to_string(state.size()) + " bytes, more than [lanes] state_mb (" +
                        std::to_string(slot.limits.state_bytes >> 20) +
                        " MiB); the checkpoint is written without the lane's state");
      states[slot.name] = std::move(state);
    } catch (const std::exception& error) {
      slot.quarantine("save failed: " + std::string(error.what()), logger);
    }
  }
  return states;
}

void load_lane_progress(LaneSlots& slots, const std::map<std::string, std::string>& states, bool torn_down,
                        const LaneLogger& logger) {
  for (const auto& [name, state] : states) {
    const auto found = std::find_if(slots.begin(), slots.end(), [&](const auto& slot) { return slot->name == name; });
    if (found == slots.end()) {
      logger("saved progress of lane '" + name + "' ignored: the lane does not run here");
      continue;
    }
    LaneSlot& slot = **found;
    if (!slot.ensure_setup(torn_down, logger)) continue;
    slot.quiesce();
    try {
      slot.lane->load(state);
      slot.stats.finished = slot.lane->finished();
    } catch (const LaneTimeout& error) {
      slot.quarantine(error.what(), logger);
    } catch (const LaneCrash& error) {
      slot.quarantine(error.what(), logger);
    } catch (const ArenaQuotaError& error) {
      slot.quarantine("load went past its arena quota: " + std::string(error.what()), logger);
    } catch (const std::exception& error) {
      slot.quarantine("load failed: " + std::string(error.what()), logger);
    }
  }
}

}  // namespace pipelane
