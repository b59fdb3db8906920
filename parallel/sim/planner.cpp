#include "parallel/sim/planner.h"

#include <algorithm>
#include <cmath>

#include "parallel/sim/job_memory.h"

namespace pipelane::sim {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Pareto frontier: no other candidate is at least as fast and at least as valuable, and better in one.
void mark_frontier(std::vector<PlanCandidate>& all) {
  for (PlanCandidate& c : all) {
    c.on_frontier = std::none_of(all.begin(), all.end(), [&](const PlanCandidate& o) {
      return o.tokens_per_s >= c.tokens_per_s && o.lane_value_per_hour >= c.lane_value_per_hour &&
             (o.tokens_per_s > c.tokens_per_s || o.lane_value_per_hour > c.lane_value_per_hour);
    });
  }
}

}  // namespace

std::string balanced_layer_split(const GptConfig& model, int seq_len, int pp) {
  if (pp < 2 || model.layers < pp) return "";
  const double d = model.d_model, T = seq_len;
  const double layer = 3 * (2 * model.layer_matrix_params() + 4 * T * d);  // forward + backward per token
  const double head = 6 * d * model.padded_vocab();          // fused forward + backward per token
  // Layers the last stage gives up for its head, rounded, at most all but one of its share.
  const int even = model.layers / pp;
  const int shift = std::min(std::max(0, static_cast<int>(std::lround(head / layer))), std::max(0, even - 1));
  if (shift == 0 && model.layers % pp == 0) return "";
  std::vector<int> counts(pp, 0);
  int left = model.layers;
  counts[pp - 1] = std::max(1, even - shift);
  left -= counts[pp - 1];
  for (int s = 0; s < pp - 1; ++s) {
    counts[s] = left / (pp - 1 - s);
    left -= counts[s];
  }
  // The other stages share the rest evenly (any remainder on the later ones).
  std::string out;
  for (int s = 0; s < pp; ++s) {
    if (s) out += ',';
    out += std::to_string(counts[s]);
  }
  return out;
}

namespace {

// The values of a switch that differ for a job: "on" is "off" where the feature has nothing to
// cut (dp 1 for the distributed optimizer, tp 1 for sequence parallelism), so it is tried once.
std::vector<bool> distinct_switches(const std::vector<bool>& asked, bool can_cut) {
  std::vector<bool> out;
  for (bool on : asked)
    if (std::find(out.begin(), out.end(), on && can_cut) == out.end()) out.push_back(on && can_cut);
  return out;
}

// recompute_layers of a block-recompute job whose count try_candidate chooses (the fewest that fit).
constexpr int kFewestThatFit = 0;

// `job` with each combination of the space's memory features that makes another job.
void add_memory_variants(const PlanSpace& space, const JobSpec& job, std::vector<JobSpec>& jobs) {
  std::vector<RecomputeOptions> recomputes;
  for (RecomputeKind kind : space.recompute) recomputes.push_back({kind, RecomputeMethod::Uniform, 1});
  if (space.recompute_fewest_block) recomputes.push_back({RecomputeKind::Full, RecomputeMethod::Block, kFewestThatFit});
  for (const RecomputeOptions& recompute : recomputes)
    for (bool zero : distinct_switches(space.distributed_optimizer, job.dp > 1))
      for (bool sp : distinct_switches(space.sequence_parallel,
                                       job.tp > 1 && (job.micro_batch * job.seq_len) % job.tp == 0)) {
        JobSpec variant = job;
        variant.recompute = recompute;
        variant.distributed_optimizer = zero;
        variant.sequence_parallel = sp;
        jobs.push_back(variant);
      }
}

// The jobs of one (pp, tp, dp, micro batch): each schedule (interleaved at each virtual-stage
// count), with an even layer split where the layers divide and the balanced one where it differs,
// each with its memory features.
void add_jobs_of_grid(const PlanSpace& space, const JobSpec& grid, std::vector<JobSpec>& jobs) {
  const int pp = grid.schedule.pp;
  for (ScheduleKind kind : space.schedules) {
    std::vector<int> vs{1};
    if (kind == ScheduleKind::Interleaved) vs = space.virtual_stages;
    for (int v : vs) {
      JobSpec job = grid;
      job.schedule = {kind, pp, v, grid.schedule.microbatches};
      try {
        validate_schedule_spec(job.schedule);
      } catch (const std::invalid_argument&) {
        continue;
      }
      if (kind == ScheduleKind::Interleaved && pp < 2) continue;
      if (space.model.layers % (pp * v) == 0) add_memory_variants(space, job, jobs);
      if (space.balanced_split && v == 1) {
        const std::string split = balanced_layer_split(space.model, space.seq_len, pp);
        if (!split.empty()) {
          job.layers_per_stage = split;
          add_memory_variants(space, job, jobs);
        }
      }
    }
  }
}

// Every job of the space on `devices` devices: pp dividing them, tp a power of two within a node
// and dividing the heads, dp the rest, micro batches dividing a replica's share of the batch.
std::vector<JobSpec> candidate_jobs(const PlanSpace& space, int devices, int max_tp, bool replicas_across_sites) {
  std::vector<JobSpec> jobs;
  for (int pp : divisors(devices)) {
    if (pp > space.model.layers) continue;
    for (int tp = 1; tp <= max_tp && pp * tp <= devices; tp *= 2) {
      if (devices % (pp * tp) != 0 || space.model.heads % tp != 0) continue;
      const int dp = devices / (pp * tp);
      if (space.global_batch % dp != 0) continue;
      std::vector<int> micro_batches = space.micro_batches;
      if (micro_batches.empty())
        for (int mb = 1; mb <= space.global_batch / dp; mb *= 2) micro_batches.push_back(mb);
      for (int mb : micro_batches) {
        if ((space.global_batch / dp) % mb != 0) continue;
        JobSpec grid;
        grid.model = space.model;
        grid.seq_len = space.seq_len;
        grid.gemm_weights = space.gemm_weights;
        grid.micro_batch = mb;
        grid.tp = tp;
        grid.dp = dp;
        grid.replicas_across_sites = replicas_across_sites;
        grid.schedule.pp = pp;
        grid.schedule.microbatches = space.global_batch / dp / mb;
        add_jobs_of_grid(space, grid, jobs);
      }
    }
  }
  return jobs;
}

// A simulated candidate's figures: throughput with and without lanes, and what the lanes' work
// is worth per hour of training.
PlanCandidate candidate_of(const JobSpec& job, const Cluster& cluster, const SimulationOutcome& out) {
  PlanCandidate c;
  c.job = job;
  c.tokens_per_s_off = out.tokens_per_s;
  c.tokens_per_s = out.on ? out.tokens_per_s_lanes : out.tokens_per_s;
  c.bubble_fraction = out.off.bubble_fraction;
  c.stage_memory = out.stage_memory_bytes;
  c.max_stage_memory = *std::max_element(c.stage_memory.begin(), c.stage_memory.end());
  c.training_per_hour = job.world() * cluster.device.price_per_hour;
  if (out.placement.multi_site()) c.sites = out.placement.describe(cluster.site_map());
  if (!out.on) return c;
  double bubble = 0, harvested = 0;
  for (const StageReport& st : out.on->stages) {
    bubble += st.bubble_after_profiling_s;
    harvested += st.harvested_after_profiling_s;
  }
  c.harvest_fraction = bubble > 0 ? harvested / bubble : 0.0;
  c.lane_value_per_hour = out.on->train_s > 0 ? out.value_usd / out.on->train_s * 3600 : 0.0;
  for (const LaneValue& v : out.values)
    c.lane_units_per_hour.push_back(out.on->train_s > 0 ? v.units / out.on->train_s * 3600 : 0.0);
  c.net_saving = out.net_saving;
  c.gross_saving = out.gross_saving;
  c.overhead = out.overhead;
  return c;
}

// The fewest layers a block recompute of every stage must rerun for `job` (its recompute aside)
// to fit the device: 0 when it fits without recomputation; more layers than a stage has when it
// does not fit at all. Memory falls as the count grows (each more layer keeps only its output),
// so a bisection.
int fewest_block_layers(const JobSpec& job, const Cluster& cluster) {
  const auto fits = [&](int layers) {
    JobSpec j = job;
    j.recompute = layers == 0 ? RecomputeOptions{} : RecomputeOptions{RecomputeKind::Full, RecomputeMethod::Block, layers};
    const std::vector<double> memory = job_memory_bytes(j, cluster.device.precision);
    return *std::max_element(memory.begin(), memory.end()) <= cluster.device.memory_bytes;
  };
  JobSpec plain = job;
  plain.recompute = {};
  int most = 0;  // layers of the largest chunk
  for (const ChunkShape& c : job_shape(plain).virtual_stages) most = std::max(most, c.range.num_layers());
  if (fits(0)) return 0;
  if (!fits(most)) return most + 1;
  int lo = 0, hi = most;  // !fits(lo), fits(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

// Places and sizes `asked` (choosing its block recompute's layer count when it asks for the
// fewest that fit), simulates it when it fits, and adds it to `result` as a candidate or as a
// rejection.
void try_candidate(const JobSpec& asked, const SimulationSetup& base, PlanResult& result) {
  const Cluster& cluster = base.cluster;
  JobSpec job = asked;
  SimulationSetup setup;
  setup.cluster = cluster;
  setup.profile = base.profile;
  setup.lanes = base.lanes;
  setup.lane_stages = base.lane_stages;
  setup.lane_settings = base.lane_settings;
  setup.all_reduce = base.all_reduce;
  setup.iterations = base.iterations;
  setup.wan = base.wan;
  setup.force_sites = base.force_sites;
  try {
    const SitePlacement placement = job_placement(job, cluster);
    if (!placement_refusal(placement, base.force_sites).empty()) {
      ++result.rejected_sites;
      return;
    }
    if (job.recompute.method == RecomputeMethod::Block && job.recompute.layers == kFewestThatFit) {
      const int layers = fewest_block_layers(job, cluster);
      if (layers == 0) return;  // it fits without: the recompute-none job, not this one
      // Past the largest stage: the memory of recomputing every layer is rejected below.
      job.recompute.layers = layers;
    }
    job_shape(job);  // a split the model does not allow is a shape rejection, before its memory
    setup.job = job;
    const std::vector<double> memory = job_memory_bytes(job, cluster.device.precision);
    const double most = *std::max_element(memory.begin(), memory.end());
    if (result.smallest_memory_needed < 0 || most < result.smallest_memory_needed) result.smallest_memory_needed = most;
    if (most > cluster.device.memory_bytes) {
      ++result.rejected_memory;
      return;
    }
    result.candidates.push_back(candidate_of(job, cluster, run_simulation(setup)));
  } catch (const DoesNotFit&) {
    ++result.rejected_memory;
  } catch (const std::invalid_argument&) {
    ++result.rejected_shape;
  }
}

// "recompute none/selective/full, distributed optimizer off/on": the memory features searched.
std::string searched_features(const PlanSpace& space) {
  std::string out = "recompute ";
  for (std::size_t k = 0; k < space.recompute.size(); ++k)
    out += (k ? "/" : "") + std::string(recompute_kind_name(space.recompute[k]));
  if (space.recompute_fewest_block) out += std::string(space.recompute.empty() ? "" : "/") + "block";
  const auto switches = [](const std::vector<bool>& values) {
    std::string s;
    for (std::size_t k = 0; k < values.size(); ++k) s += (k ? "/" : "") + std::string(values[k] ? "on" : "off");
    return s;
  };
  out += ", distributed optimizer " + switches(space.distributed_optimizer);
  out += ", sequence parallel " + switches(space.sequence_parallel);
  return out;
}

DoesNotFit fits_no_device(const PlanSpace& space, const Cluster& cluster, const PlanResult& result, std::size_t tried,
                          int devices) {
  char need[64];
  std::snprintf(need, sizeof need, "%.2f GiB", result.smallest_memory_needed / (1024.0 * 1024.0 * 1024.0));
  return DoesNotFit("the model fits no " + cluster.device.name + " of cluster " + cluster.name + ": " +
                    std::to_string(tried) + " ways to split it over " + std::to_string(devices) +
                    " devices tried (" + searched_features(space) + "), the smallest needs " +
                    (result.smallest_memory_needed > 0 ? std::string(need) : std::string("?")) +
                    " on one device, which has " +
                    std::to_string(static_cast<int>(cluster.device.memory_bytes / (1024.0 * 1024.0 * 1024.0))) +
                    " GiB");
}

}  // namespace

PlanResult plan_jobs(const PlanSpace& space, const SimulationSetup& base,
                     const std::function<void(int, int)>& progress) {
  const Cluster& cluster = base.cluster;
  const int devices = space.devices > 0 ? space.devices : cluster.devices();
  const int max_tp = space.max_tp > 0 ? space.max_tp : cluster.devices_per_node;
  const std::vector<JobSpec> jobs = candidate_jobs(space, devices, max_tp, base.job.replicas_across_sites);
  PlanResult result;
  result.smallest_memory_needed = -1;
  int done = 0;
  for (const JobSpec& job : jobs) {
    if (progress) progress(done, static_cast<int>(jobs.size()));
    ++done;
    try_candidate(job, base, result);
  }
  if (progress) progress(done, static_cast<int>(jobs.size()));
  if (result.candidates.empty()) throw fits_no_device(space, cluster, result, jobs.size(), devices);
  std::sort(result.candidates.begin(), result.candidates.end(),
            [](const PlanCandidate& a, const PlanCandidate& b) { return a.tokens_per_s > b.tokens_per_s; });
  mark_frontier(result.candidates);
  return result;
}

}  // namespace pipelane::sim
