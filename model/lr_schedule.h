// Linear warmup to the peak, then cosine decay to a floor (Megatron-LM's "cosine" style).
#pragma once

namespace pipelane {

struct LrSchedule {
  double peak = 1e-3, floor = 1e-4;
  int warmup_steps = 0, total_steps = 1;
  // Learning rate for 0-based step `step`.
  double at(int step) const;
};

}  // namespace pipelane
