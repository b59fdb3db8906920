// Everything besides tensors that a resumed run needs to continue exactly, and its JSON (stored as
// the /state/progress attribute of every shard file).
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipelane {

// Where a data sampler is, as opaque words its owner can restore from. `kind` names the format
// so a different sampler refuses a state it cannot read.
struct CheckpointSamplerState {
  std::string kind;
  std::vector<std::uint64_t> words;
};

// Numerical-fault bookkeeping (trainer/run/step_guard.h), saved so resume is exact.
struct StepGuardState {
  std::int64_t consecutive_bad = 0;
  std::int64_t skipped_nonfinite = 0;
  std::int64_t skipped_spike = 0;
  std::int64_t loss_count = 0;  // applied steps seen by the spike detector
  double loss_mean = 0, loss_var = 0;
};

// The sampler kind of an imported checkpoint (`pipelane import`): weights only, nothing to resume.
inline constexpr const char* kWeightsOnlySampler = "weights-only";

struct TrainingProgress {
  int step = 0;  // optimizer steps completed; AdamW's next t is step + 1
  nlohmann::json lr_schedule;  // {lr, min_lr, warmup_steps, steps, next_lr}: informational
  CheckpointSamplerState sampler;
  StepGuardState guard;
};
nlohmann::json to_json(const TrainingProgress& p);
// Throws nlohmann::json's exceptions or std::out_of_range on a malformed object or a number out of
// range (the caller names the file).
TrainingProgress progress_from_json(const nlohmann::json& j);

}  // namespace pipelane
