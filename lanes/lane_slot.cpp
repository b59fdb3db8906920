#include "lanes/lane_slot.h"

#include <algorithm>
#include <filesystem>

#include "lanes/isolation/thread_lane.h"

namespace pipelane {
namespace {

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::uint64_t lane_seed(std::uint64_t seed, const std::string& name, int rank) {
  // splitmix64 of the mix, so neighbouring ranks/seeds give unrelated streams.
  std::uint64_t z = seed ^ fnv1a(name) ^ (static_cast<std::uint64_t>(rank) * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::unique_ptr<Arena> make_lane_arena(const LaneSlot& slot, Backend& backend, bool device_backend,
                                       const GapSchedulerOptions& options) {
  std::string arena_name = "lane " + slot.name + " stage " + std::to_string(options.stage);
  if (!device_backend)  // the CPU backend: its "device" memory is host memory
    return backend.create_arena(std::move(arena_name), options.lane_memory_bytes, MemoryKind::Device);
  if (slot.on_device)  // the pool refuses past the quota too
    return backend.create_arena(std::move(arena_name), options.lane_memory_bytes, MemoryKind::DevicePool);
  // its code dereferences its memory on the CPU
  return std::make_unique<Arena>(std::move(arena_name), options.lane_memory_bytes);
}

}  // namespace

std::unique_ptr<LaneSlot> make_lane_slot(std::string name, LaneSpec spec, Backend& backend, bool device_backend,
                                         const GapSchedulerOptions& options, const std::function<double()>& clock) {
  auto slot = std::make_unique<LaneSlot>();
  slot->name = std::move(name);
  slot->stats.work_unit = spec.lane->work_unit();
  slot->on_device = device_backend && spec.lane->runs_on_device();
  if (dynamic_cast<GuardedLane*>(spec.lane.get()))
    slot->lane.reset(static_cast<GuardedLane*>(spec.lane.release()));
  else
    slot->lane = std::make_unique<ThreadLane>(std::move(spec.lane));
  slot->limits.call_deadline_s = options.call_deadline_s;
  slot->limits.output_bytes = options.lane_output_bytes;
  slot->limits.state_bytes = options.lane_state_bytes;
  slot->lane->set_limits(slot->limits);
  slot->late.assign(static_cast<std::size_t>(std::max(1, options.runaway_window)), 0);
  slot->options = std::move(spec.options);
  slot->arena = make_lane_arena(*slot, backend, device_backend, options);
  slot->stream = backend.create_stream(StreamPriority::Low);
  if (slot->on_device) {
    slot->host_thread = std::make_unique<DeviceLaneThread>();
    slot->origin = backend.create_event();
    slot->origin->record(*slot->stream);
    slot->origin->synchronize();
    slot->origin_s = clock();
  }
  if (!options.output_root.empty())
    slot->output_dir = (std::filesystem::path(options.output_root) / slot->name /
                        ("rank" + std::to_string(options.rank))).string();
  slot->ctx.reset(new LaneContext{backend, *slot->stream, *slot->arena, slot->options, slot->output_dir,
                                  options.rank, lane_seed(options.seed, slot->name, options.rank),
                                  options.world_size, options.instance_index, options.instance_count});
  return slot;
}

bool LaneSlot::ensure_setup(bool scheduler_torn_down, const LaneLogger& logger) {
  if (set_up) return !stats.quarantined;
  if (stats.quarantined || scheduler_torn_down) return false;
  try {
    if (!output_dir.empty()) std::filesystem::create_directories(output_dir);
    set_up = true;  // teardown() is owed from here on, even if setup() throws half-way
    lane->set_limits(limits);
    lane->setup(*ctx);
  } catch (const LaneTimeout& error) {
    quarantine(error.what(), logger);
  } catch (const LaneCrash& error) {
    quarantine(error.what(), logger);
  } catch (const ArenaQuotaError& error) {
    quarantine("setup went past its arena quota: " + std::string(error.what()), logger);
  } catch (const LaneError& error) {
    quarantine("setup failed: " + std::string(error.what()), logger);
  } catch (const std::exception& error) {
    quarantine("setup threw: " + std::string(error.what()), logger);
  } catch (...) {
    quarantine("setup threw a non-standard exception", logger);
  }
  return !stats.quarantined;
}

void LaneSlot::quarantine(const std::string& reason, const LaneLogger& logger) {
  if (stats.quarantined) return;
  stats.quarantined = true;
  stats.quarantine_reason = reason;
  // Steps still posted do not run; the one running (if any) ends within its deadline.
  stopped = true;
  quiesce();
  if (set_up && !torn_down) {
    torn_down = true;
    try {
      lane->teardown(*ctx);
    } catch (const std::exception& error) {
      stats.quarantine_reason += " (teardown also failed: " + std::string(error.what()) + ")";
    } catch (...) {
      stats.quarantine_reason += " (teardown also failed)";
    }
  }
  logger("lane '" + name + "' quarantined: " + stats.quarantine_reason + "; training continues without it");
}

void LaneSlot::teardown(const LaneLogger& logger) {
  if (!set_up || torn_down) return;
  torn_down = true;
  try {
    lane->teardown(*ctx);
  } catch (const LaneCrash& error) {
    // Its worker died after its last reply (a step that killed its own process, say): the
    // summary says so, as it would have had the lane been asked for another step.
    if (!stats.quarantined) {
      stats.quarantined = true;
      stats.quarantine_reason = "teardown: " + std::string(error.what());
    }
    logger("lane '" + name + "': teardown failed: " + error.what());
  } catch (const std::exception& error) {
    logger("lane '" + name + "': teardown failed: " + error.what());
  } catch (...) {
    logger("lane '" + name + "': teardown failed");
  }
}

std::string call_step(GuardedLane& lane, LaneContext& ctx, double* units) {
  try {
    *units = lane.step(ctx);
    return "";
  } catch (const LaneTimeout& error) {  // the host's own sentence (deadline, what was killed)
    return error.what();
  } catch (const LaneCrash& error) {
    return error.what();
  } catch (const ArenaQuotaError& error) {
    return "went past its arena quota: " + std::string(error.what());
  } catch (const LaneError& error) {
    return "step failed: " + std::string(error.what());
  } catch (const std::exception& error) {
    return "step threw: " + std::string(error.what());
  } catch (...) {
    return "step threw a non-standard exception";
  }
}

}  // namespace pipelane
