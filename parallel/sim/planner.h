// `pipelane plan`'s search: every way to run a model on a cluster's devices - pipeline, tensor and
// data parallel degrees, micro batch (hence microbatches), schedule, virtual stages, layer split,
// and the memory features (recomputation, the distributed optimizer, sequence parallelism) - that
// fits each device's memory by the memory model, simulated with and without lanes (what
// recomputation reruns and what ZeRO's collectives cost priced, and so the bubbles they change),
// and the frontier of training throughput against what the lanes' work is worth.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "parallel/sim/simulation.h"

namespace pipelane::sim {

struct PlanSpace {
  GptConfig model;
  int seq_len = 1024;
  int global_batch = 8;  // sequences per iteration, fixed across candidates
  int devices = 0;       // devices to use (0: the whole cluster)
  std::vector<ScheduleKind> schedules{ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                                      ScheduleKind::ZeroBubbleH1};
  std::vector<int> virtual_stages{2, 4};  // tried for interleaved
  std::vector<int> micro_batches;          // empty: powers of two up to the global batch
  int max_tp = 0;                          // 0: the devices of a node
  bool balanced_split = true;              // also try the split that evens the stages' FLOPs
  // The memory features, each one more dimension: every combination with the grid above. Full
  // recomputation is tried as Megatron-LM's default (uniform, every layer its own group).
  std::vector<RecomputeKind> recompute{RecomputeKind::None, RecomputeKind::Selective, RecomputeKind::Full};
  // Also full recomputation of only the first k layers of every stage (method block), k the
  // fewest that make the job fit (memory falls as k grows); not tried where it fits without.
  bool recompute_fewest_block = false;
  // On where dp > 1 (at dp 1 it shards nothing: that job is tried once, as off).
  std::vector<bool> distributed_optimizer{false, true};
  // On where tp > 1 and tp divides a microbatch's rows (likewise).
  std::vector<bool> sequence_parallel{false};
  // The config's [train] gemm_weights, every candidate's (not searched: a bf16 copy changes no
  // result, only memory and, under the distributed optimizer, what the parameter gather moves).
  DType gemm_weights = DType::F32;
};

struct PlanCandidate {
  JobSpec job;
  double tokens_per_s = 0;        // lanes on (lanes off when there are no lanes)
  double tokens_per_s_off = 0;    // lanes off
  double bubble_fraction = 0;     // lanes off
  double harvest_fraction = 0;    // of the bubble, after profiling
  double lane_value_per_hour = 0; // $ of lane work per hour of training (every device)
  std::vector<double> lane_units_per_hour;  // per lane: its work units per hour of training
  double training_per_hour = 0;   // $ per hour of the training devices
  double net_saving = 0, gross_saving = 0, overhead = 0;
  double max_stage_memory = 0;    // bytes: the largest rank's, by the memory model
  std::vector<double> stage_memory;  // bytes per rank of each pipeline stage
  bool on_frontier = false;
  std::string sites;              // where its stages go when the cluster has sites ("" otherwise)
};

struct PlanResult {
  std::vector<PlanCandidate> candidates;  // every candidate that fits, fastest first
  int rejected_memory = 0;                // candidates over a device's memory (memory features included)
  int rejected_shape = 0;                 // splits the model does not allow
  int rejected_sites = 0;                 // a tensor-parallel group across sites (parallel/sites.h)
  double smallest_memory_needed = 0;      // over all candidates (bytes): "fits no device" says it
};

// `base` carries the lanes, lane settings, cluster, all-reduce, iterations and WAN settings; its job
// is ignored but for its placement (replicas_across_sites). With sites, each candidate's stages go
// across them as the rank grid places them (parallel/sites.h) and the candidate says which site
// holds which stages; one that puts a tensor-parallel group across sites is rejected (unless
// base.force_sites).
// DoesNotFit when no candidate fits.
PlanResult plan_jobs(const PlanSpace& space, const SimulationSetup& base,
                     const std::function<void(int done, int total)>& progress = {});

// The layer counts per stage (pp of them) that even out the stages' compute: the first stage has
// the embedding (free), the last the head, whose FLOPs count as layers'. "" when an even split is
// already the best or the model has fewer layers than stages.
std::string balanced_layer_split(const GptConfig& model, int seq_len, int pp);

}  // namespace pipelane::sim
