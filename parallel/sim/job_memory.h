// A simulated job's training memory per pipeline stage: the memory model's (parallel/memory_model.h),
// the one the executor sizes its arena with and `pipelane memory` prints, for the job's grid,
// schedule, recomputation, distributed optimizer and sequence parallelism at the device's storage
// width. No formula of its own: what fits here is what the executor would allocate.
#pragma once
#include <vector>

#include "parallel/memory_model.h"
#include "parallel/sim/job_shape.h"

namespace pipelane::sim {

// The memory model's input for `job` at `element_bytes` a stored element (4: pipelane's fp32
// layout; 2: the same layout in 16-bit storage beside fp32 master weights).
MemorySpec memory_spec_of(const JobSpec& job, int element_bytes);

// Each pipeline stage's rank (tensor-parallel rank 0: the group's ranks hold the same sizes; data-
// parallel replicas are copies). std::invalid_argument (one line) for a split the model does not allow.
std::vector<RankMemory> job_memory(const JobSpec& job, int element_bytes);

// Their totals in bytes, stage by stage.
std::vector<double> job_memory_bytes(const JobSpec& job, int element_bytes);

}  // namespace pipelane::sim
