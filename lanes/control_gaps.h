// Control gaps: after profiling, about one gap in `control_every` is left empty on purpose, so that
// training's time after a gap that held lane work can be compared with its time after the same gap
// without any (lanes/interference_estimate.h): what lanes cost training beyond their overrun.
//
// The choice is a hash of (iteration, gap id, stage), not a random draw: a rerun (and a replayed
// plan) leaves the same gaps empty, the control gaps spread over every gap id rather than
// following the schedule's period, and the stages' choices are independent of each other. The
// training seed is left out so that a plan replayed under another seed still places lane work in
// the same gaps.
#pragma once

namespace pipelane {

// True when the gap `gap_id` of `iteration` on `stage` is a control gap; never when control_every <= 0.
bool is_control_gap(int iteration, int gap_id, int stage, int control_every);

}  // namespace pipelane
