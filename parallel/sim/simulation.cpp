#include "parallel/sim/simulation.h"

#include <algorithm>
#include <cstdio>

#include "parallel/sim/job_memory.h"

namespace pipelane::sim {

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

std::vector<double> check_memory(const JobSpec& job, const Cluster& cluster) {
  const std::vector<double> memory = job_memory_bytes(job, cluster.device.precision);
  for (std::size_t s = 0; s < memory.size(); ++s)
    if (memory[s] > cluster.device.memory_bytes) {
      const std::string features = describe_memory_features(memory_spec_of(job, cluster.device.precision));
      throw DoesNotFit("stage " + std::to_string(s) + " needs " + gib(memory[s]) + " of training memory (tp " +
                       std::to_string(job.tp) + ", pp " + std::to_string(job.schedule.pp) + ", " +
                       schedule_kind_name(job.schedule.kind) + ", micro batch " + std::to_string(job.micro_batch) +
                       (features.empty() ? "" : ", " + features) + "), more than the " +
                       gib(cluster.device.memory_bytes) + " of a " + cluster.device.name);
    }
  return memory;
}

Cluster cluster_for_wan(const SimulationSetup& setup) {
  Cluster cluster = setup.cluster;
  if (!setup.wan) return cluster;
  if (cluster.inter_site) cluster.inter_site->connections = setup.wan->connections;
  for (auto& [pair, link] : cluster.site_links) link.connections = setup.wan->connections;
  return cluster;
}

std::vector<std::vector<Instr>> simulated_lists(const SimulationSetup& setup, const SitePlacement& placement) {
  const ScheduleSpec& spec = setup.job.schedule;
  const RankGrid grid(placement.dims);
  std::vector<std::vector<Instr>> lists;
  for (int s = 0; s < spec.pp; ++s) {
    std::vector<Instr> list = build_schedule(spec, s);
    // Pipeline 0 (tp 0, dp 0): the first turn of every rotation it takes part in.
    if (setup.wan) list = lower_for_wan(std::move(list), wan_route(placement, grid.rank_of({0, 0, s}), *setup.wan));
    lists.push_back(std::move(list));
  }
  return lists;
}

SimulationOutcome run_simulation(const SimulationSetup& setup) {
  const JobSpec& job = setup.job;
  const ScheduleSpec& spec = job.schedule;
  setup.cluster.validate();
  const Cluster cluster = cluster_for_wan(setup);
  SimulationOutcome out;
  out.placement = job_placement(job, cluster);
  const std::string refusal = placement_refusal(out.placement, setup.force_sites);
  if (!refusal.empty()) throw std::invalid_argument(refusal);
  out.shape = job_shape(job);
  out.stage_memory_bytes = check_memory(job, cluster);
  out.ops = setup.profile ? profile_op_table(job, out.shape, *setup.profile, cluster, setup.all_reduce)
                          : device_op_table(job, out.shape, cluster, setup.all_reduce);
  out.profile_as_measured = setup.profile && profile_matches(job, *setup.profile);
  JobCostModel model(job, out.shape, cluster, out.ops, setup.all_reduce);
  model.set_wake(setup.wake_samples);
  model.set_seed(setup.seed);
  out.replicas_identical = model.replicas_identical();

  const std::vector<std::vector<Instr>> lists = simulated_lists(setup, out.placement);
  model.plan_wan(lists);
  out.off = simulate_job(spec, lists, model, nullptr, setup.iterations, setup.lanes.empty() ? setup.keep_timelines : 0);
  const double tokens = job.tokens_per_iteration();
  out.tokens_per_s = out.off.step_s_median > 0 ? tokens / out.off.step_s_median : 0.0;
  if (setup.lanes.empty()) return out;

  out.runs_on.assign(spec.pp, std::vector<bool>(setup.lanes.size(), false));
  for (int s = 0; s < spec.pp; ++s) {
    const bool stage_allowed = setup.lane_stages.empty() ||
                               std::find(setup.lane_stages.begin(), setup.lane_stages.end(), s) != setup.lane_stages.end();
    const double free = cluster.device.memory_bytes - out.stage_memory_bytes[s];
    for (std::size_t l = 0; l < setup.lanes.size(); ++l)
      out.runs_on[s][l] = stage_allowed && setup.lanes[l].memory_bytes <= free;
  }
  out.lanes = std::make_unique<LaneSimulator>(setup.lanes, out.runs_on, setup.lane_settings);
  out.on = simulate_job(spec, lists, model, out.lanes.get(), setup.iterations, setup.keep_timelines);
  out.tokens_per_s_lanes = out.on->step_s_median > 0 ? tokens / out.on->step_s_median : 0.0;

  // Every rank of a stage (tp x dp of them) runs that stage's lanes the same way.
  const double ranks_per_stage = static_cast<double>(job.tp) * job.dp;
  const double world = job.world();
  out.training_price_per_hour = cluster.device.price_per_hour;
  for (std::size_t l = 0; l < setup.lanes.size(); ++l) {
    const LaneModel& lane = setup.lanes[l];
    LaneValue v;
    for (int s = 0; s < spec.pp; ++s) v.units += out.lanes->totals()[s][l].units * ranks_per_stage;
    v.value_device_s = v.units / lane.value_rate_units_per_s();
    v.price_per_hour = lane.dedicated_price_per_hour > 0 ? lane.dedicated_price_per_hour : out.training_price_per_hour;
    v.value_usd = v.value_device_s * v.price_per_hour / 3600;
    out.value_usd += v.value_usd;
    out.values.push_back(v);
  }
  const double t_off = out.off.train_s, t_on = out.on->train_s;
  out.training_usd = world * t_off * out.training_price_per_hour / 3600;
  out.extra_usd = world * (t_on - t_off) * out.training_price_per_hour / 3600;
  out.overhead = t_off > 0 ? (t_on - t_off) / t_off : 0.0;
  out.gross_saving = out.training_usd > 0 ? out.value_usd / out.training_usd : 0.0;
  out.net_saving = out.training_usd > 0 ? (out.value_usd - out.extra_usd) / out.training_usd : 0.0;
  return out;
}

}  // namespace pipelane::sim
