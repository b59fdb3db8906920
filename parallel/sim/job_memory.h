// A simulated job's training memory per pipeline stage: the memory model's (parallel/memory_model.h),
// the one the executor sizes its arena with and `pipelane memory` prints, for the job's grid,
// schedule, recomputation, distributed optimizer and sequence parallelism, in the layout pipelane
// stores at the device's precision: fp32; or for a bf16 device `[train] precision = bf16` with
// `storage = bf16` (bf16 activations and messages, fp32 weights, gradients and AdamW state, one
// fp32 layer of workspace). No formula of its own: what fits here is what the executor would
// allocate.
#pragma once
#include <vector>

#include "parallel/memory_model.h"
#include "parallel/sim/hardware.h"
#include "parallel/sim/job_shape.h"

namespace pipelane::sim {

// The memory model's input for `job` on a device of `precision` (above).
MemorySpec memory_spec_of(const JobSpec& job, Precision precision);

// Each pipeline stage's rank (tensor-parallel rank 0: the group's ranks hold the same sizes; data-
// parallel replicas are copies). std::invalid_argument (one line) for a split the model does not allow.
std::vector<RankMemory> job_memory(const JobSpec& job, Precision precision);

// Their totals in bytes, stage by stage.
std::vector<double> job_memory_bytes(const JobSpec& job, Precision precision);

}  // namespace pipelane::sim
