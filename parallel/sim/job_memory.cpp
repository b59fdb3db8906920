#include "parallel/sim/job_memory.h"

#include <memory>

#include "runtime/backend_registry.h"

namespace pipelane::sim {

MemorySpec memory_spec_of(const JobSpec& job, Precision precision) {
  MemorySpec m;
  m.model = job.model;
  m.schedule = job.schedule;
  m.tp = job.tp;
  m.micro_batch = job.micro_batch;
  m.seq_len = job.seq_len;
  m.layers_per_stage = job.layers_per_stage;
  m.recompute = job.recompute;
  m.storage = precision == Precision::Bf16 ? DType::BF16 : DType::F32;
  m.optimizer_shards = job.optimizer_shards();
  m.sequence_parallel = job.sequence_parallel;
  m.gemm_weights = job.gemm_weights;
  return m;
}

std::vector<RankMemory> job_memory(const JobSpec& job, Precision precision) {
  // Sizes only: the CPU backend's rules (its attention keeps the probabilities [B, heads, T, T]),
  // as `pipelane memory` sizes them.
  const MemorySpec spec = memory_spec_of(job, precision);
  const std::unique_ptr<Backend> sizing = make_sizing_backend(spec);
  return predict_memory(spec, *sizing);
}

std::vector<double> job_memory_bytes(const JobSpec& job, Precision precision) {
  std::vector<double> out;
  for (const RankMemory& r : job_memory(job, precision)) out.push_back(r.total());
  return out;
}

}  // namespace pipelane::sim
