// synthetic: a lane whose steps are a controlled amount of time over a controlled working set,
// for measuring what lanes cost training apart from what they compute (scripts/bench/lane_cost.sh):
// step_us = 0 is a lane the scheduler places but that does nothing (its bookkeeping alone); a
// step of the real lanes' duration over a few KiB is their time alone; the same over tens of MiB
// adds their cache and memory-bandwidth pressure.
//
// [lane.synthetic] options
//   step_us = 1000        busy time of one step, microseconds                 [0, 10^7]
//   working_set_kb = 4    bytes the step sweeps (read and write, 64-byte lines) in a loop until
//                         step_us has passed; from ctx.arena                  [1, 2^22]
//   steps = 0             steps until finished (0: never)                     [0, 2^40]
// Work unit: busy_us (the microseconds of busy time the steps took).
#pragma once
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_synthetic_lane();

}  // namespace pipelane
