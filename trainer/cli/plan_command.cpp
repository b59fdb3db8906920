#include "trainer/cli/plan_command.h"

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/sim/planner.h"
#include "trainer/cli/command_options.h"
#include "trainer/sim/sim_inputs.h"
#include "trainer/config/wan_setup.h"

namespace pipelane {

namespace {

namespace po = boost::program_options;

struct PlanOptions {
  std::string cluster, lanes, profile, schedules = "gpipe,1f1b,interleaved,zb-h1";
  std::string recompute = "none,selective,full", distributed_optimizer = "off,on", sequence_parallel = "off";
  int devices = 0, iterations = 0, top = 10, max_tp = 0;
  bool json = false, all = false;
};

void describe(SubcommandOptions& options, PlanOptions& o) {
  options.accept_train_keys("a `pipelane train` config: its [model] and [train] global_batch (its keys also as "
                            "--section.key=value); required");
  options.add_options()
      ("cluster", po::value(&o.cluster), "cluster file (configs/clusters/*.ini); required")
      ("lanes", po::value(&o.lanes), "lane step-time distributions, JSON lines (see pipelane simulate --help)")
      ("profile", po::value(&o.profile),
       "a run directory whose measured costs (scaled by FLOPs) replace the device table's")
      ("devices", po::value(&o.devices), "devices to use (default: the whole cluster)")
      ("schedules", value_with_default(&o.schedules), "schedules to try, comma-separated")
      ("recompute", value_with_default(&o.recompute),
       "activation recomputation to try, comma-separated: none, selective (the attention core rerun "
       "before its backward), full (every layer's forward rerun: uniform, one layer a group), block "
       "(full recomputation of only the first k layers of each stage, k the fewest that fit; tried "
       "where nothing fits without)")
      ("distributed-optimizer", value_with_default(&o.distributed_optimizer),
       "the distributed optimizer (ZeRO-1 over dp) to try: off, on or off,on (at dp 1 on is off: "
       "nothing to shard)")
      ("sequence-parallel", value_with_default(&o.sequence_parallel),
       "sequence parallelism to try: off, on or off,on (at tp 1 on is off), priced as memory only "
       "(activations and messages / tp; its collectives move what tp's all-reduces move)")
      ("max-tp", po::value(&o.max_tp), "largest tensor-parallel degree (default: devices per node)")
      ("iterations", po::value(&o.iterations),
       "iterations simulated per candidate (default: [lanes] profile_iterations + 3)")
      ("top", value_with_default(&o.top), "also list this many of the fastest candidates")
      ("all", po::bool_switch(&o.all), "list every candidate that fits")
      ("json", po::bool_switch(&o.json), "print every candidate as JSON instead of the tables");
}

std::vector<ScheduleKind> parse_schedules(const std::string& text) {
  std::vector<ScheduleKind> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(parse_schedule_kind(item));
  if (out.empty()) throw SimInputError("--schedules: give at least one schedule");
  return out;
}

std::vector<std::string> comma_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  if (out.empty()) throw SimInputError("--" + flag + ": give at least one value");
  return out;
}

// none, selective, full into space.recompute; block into space.recompute_fewest_block.
void parse_recompute_kinds(const std::string& text, sim::PlanSpace& space) {
  space.recompute.clear();
  space.recompute_fewest_block = false;
  for (const std::string& item : comma_list("recompute", text)) {
    if (item == "block") {
      space.recompute_fewest_block = true;
      continue;
    }
    if (item != "none" && item != "selective" && item != "full")
      throw SimInputError("--recompute: '" + item + "': expected none, selective, full or block (comma-separated)");
    space.recompute.push_back(parse_recompute_kind(item));
  }
}

std::vector<bool> parse_switches(const std::string& flag, const std::string& text) {
  std::vector<bool> out;
  for (const std::string& item : comma_list(flag, text)) {
    if (item != "off" && item != "on")
      throw SimInputError("--" + flag + ": '" + item + "': expected off, on or off,on");
    out.push_back(item == "on");
  }
  return out;
}

// "selective + zero + sp", "-" for none: the memory features a candidate uses.
std::string describe_features(const sim::JobSpec& j) {
  std::string s;
  const auto add = [&](const std::string& what) { s += (s.empty() ? "" : " + ") + what; };
  if (j.recompute.kind == RecomputeKind::Full && j.recompute.method == RecomputeMethod::Block)
    add("full block " + std::to_string(j.recompute.layers));
  else if (j.recompute.kind != RecomputeKind::None)
    add(recompute_kind_name(j.recompute.kind));
  if (j.optimizer_shards() > 1) add("zero");
  if (j.sequence_shards() > 1) add("sp");
  return s.empty() ? "-" : s;
}

std::string describe_job(const sim::JobSpec& j) {
  std::string s = "pp " + std::to_string(j.schedule.pp) + " x tp " + std::to_string(j.tp) + " x dp " +
                  std::to_string(j.dp) + ", " + schedule_kind_name(j.schedule.kind);
  if (j.schedule.virtual_stages > 1) s += " v" + std::to_string(j.schedule.virtual_stages);
  s += ", mb " + std::to_string(j.micro_batch) + " (m " + std::to_string(j.schedule.microbatches) + ")";
  if (!j.layers_per_stage.empty()) s += ", layers " + j.layers_per_stage;
  return s;
}

// One row per plan; with lanes, the work units each lane does per hour of training and their worth.
void print_rows(const std::vector<const sim::PlanCandidate*>& rows, const std::vector<sim::LaneModel>& lanes) {
  std::printf("  %-58s %-22s %12s %8s %8s %9s %9s", "plan", "memory features", "tokens/s", "bubble", "harvest",
              "mem_GiB", "train_$/h");
  for (const sim::LaneModel& lane : lanes) std::printf(" %14s", (lane.name + "/h").substr(0, 14).c_str());
  if (!lanes.empty()) std::printf(" %10s %9s", "lanes_$/h", "net_save");
  std::printf("\n");
  for (const sim::PlanCandidate* c : rows) {
    std::printf("  %-58s %-22s %12.5g %8.4f %8.3f %9.2f %9.4g", describe_job(c->job).c_str(),
                describe_features(c->job).c_str(), c->tokens_per_s, c->bubble_fraction, c->harvest_fraction, c->max_stage_memory / (1024.0 * 1024 * 1024),
                c->training_per_hour);
    for (double units : c->lane_units_per_hour) std::printf(" %14.4g", units);
    if (!lanes.empty()) std::printf(" %10.4g %8.2f%%", c->lane_value_per_hour, 100 * c->net_saving);
    std::printf("\n");
    if (!c->sites.empty()) std::printf("      sites: %s\n", c->sites.c_str());
  }
}

sim::PlanSpace plan_space(const PlanOptions& o, const TrainOptions& train, const ClusterFile& cluster) {
  sim::PlanSpace space;
  const sim::JobSpec base_job = job_from_options(train, 1);
  space.model = base_job.model;
  space.seq_len = base_job.seq_len;
  space.gemm_weights = base_job.gemm_weights;
  space.global_batch = train.train.global_batch;
  space.devices = o.devices;
  space.schedules = parse_schedules(o.schedules);
  space.max_tp = o.max_tp;
  parse_recompute_kinds(o.recompute, space);
  space.distributed_optimizer = parse_switches("distributed-optimizer", o.distributed_optimizer);
  space.sequence_parallel = parse_switches("sequence-parallel", o.sequence_parallel);
  if (o.devices < 0 || o.devices > cluster.cluster.devices())
    throw SimInputError("--devices " + std::to_string(o.devices) + ": the cluster has " +
                        std::to_string(cluster.cluster.devices()));
  return space;
}

// What every candidate is simulated with: the cluster, WAN settings, costs, lanes and iterations.
sim::SimulationSetup candidate_base(const PlanOptions& o, bool iterations_given, const TrainOptions& train,
                                    const ClusterFile& cluster) {
  sim::SimulationSetup base;
  base.cluster = cluster.cluster;
  base.wan = wan_settings(train.wan, cluster.cluster);
  base.force_sites = train.wan.force;
  base.job.replicas_across_sites = train.wan.placement == "replicas";
  base.all_reduce = cluster.all_reduce;
  if (!o.profile.empty()) base.profile = load_run_profile(o.profile).profile;
  if (!o.lanes.empty()) base.lanes = load_lane_models(o.lanes, cluster);
  base.lane_settings.margin = train.lanes.margin;
  base.lane_settings.profile_iterations = train.lanes.profile_iterations;
  base.lane_settings.seed = train.train.seed;
  base.iterations = iterations_given ? o.iterations : train.lanes.profile_iterations + 3;
  if (base.iterations < 1) throw SimInputError("--iterations must be >= 1");
  return base;
}

void print_json(const sim::PlanResult& result) {
  nlohmann::json out = nlohmann::json::array();
  for (const sim::PlanCandidate& c : result.candidates)
    out.push_back({{"pp", c.job.schedule.pp}, {"tp", c.job.tp}, {"dp", c.job.dp},
                   {"schedule", schedule_kind_name(c.job.schedule.kind)},
                   {"virtual_stages", c.job.schedule.virtual_stages}, {"micro_batch", c.job.micro_batch},
                   {"microbatches", c.job.schedule.microbatches}, {"layers_per_stage", c.job.layers_per_stage},
                   {"recompute", recompute_kind_name(c.job.recompute.kind)},
                   {"recompute_method", recompute_method_name(c.job.recompute.method)},
                   {"recompute_layers", c.job.recompute.layers},
                   {"distributed_optimizer", c.job.optimizer_shards() > 1},
                   {"sequence_parallel", c.job.sequence_parallel},
                   {"stage_memory_bytes", c.stage_memory},
                   {"tokens_per_s", c.tokens_per_s}, {"tokens_per_s_lanes_off", c.tokens_per_s_off},
                   {"bubble_fraction", c.bubble_fraction}, {"harvest_fraction", c.harvest_fraction},
                   {"lane_value_per_hour", c.lane_value_per_hour}, {"training_per_hour", c.training_per_hour},
                   {"lane_units_per_hour", c.lane_units_per_hour},
                   {"gross_saving", c.gross_saving}, {"net_saving", c.net_saving}, {"overhead", c.overhead},
                   {"max_stage_memory_bytes", c.max_stage_memory}, {"on_frontier", c.on_frontier},
                   {"sites", c.sites}});
  std::cout << out.dump(2) << "\n";
}

// The search's header, then the frontier (with lanes) and the fastest (or every) candidate.
void print_tables(const PlanOptions& o, const sim::PlanSpace& space, const ClusterFile& cluster,
                  const sim::SimulationSetup& base, const sim::PlanResult& result, double wall_s) {
  std::printf("plan: GPT %d layers, d_model %d, %d heads, seq %d, global batch %d on %s (%d x %s, %.0f GiB, $%.3g/h)\n",
              space.model.layers, space.model.d_model, space.model.heads, space.seq_len, space.global_batch,
              cluster.cluster.name.c_str(), o.devices > 0 ? o.devices : cluster.cluster.devices(),
              cluster.cluster.device.name.c_str(), cluster.cluster.device.memory_bytes / (1024.0 * 1024 * 1024),
              cluster.cluster.device.price_per_hour);
  if (cluster.cluster.sites.size() > 1)
    std::printf("  %zu sites; stages go across them in order, tensor and data parallelism inside; cross-site "
                "transfers: %s; %d candidates refused (a tensor-parallel group across sites)\n",
                cluster.cluster.sites.size(),
                base.wan ? (std::string(wan_sharing_name(base.wan->sharing)) + ", " +
                            std::to_string(base.wan->connections) + " connection(s) each")
                               .c_str()
                         : "as the cluster file's links ([wan] sharing = off)",
                result.rejected_sites);
  std::printf("  memory features searched: recompute %s, distributed optimizer %s, sequence parallel %s; memory "
              "per rank from the memory model (mem_GiB: the largest rank)\n",
              o.recompute.c_str(), o.distributed_optimizer.c_str(), o.sequence_parallel.c_str());
  std::printf("  %zu candidates fit, %d over a device's memory; simulated in %.2f s (%s)\n",
              result.candidates.size(), result.rejected_memory, wall_s,
              base.profile ? ("costs from profile " + o.profile).c_str() : "costs from the device table");
  std::vector<const sim::PlanCandidate*> frontier, fastest, all;
  for (const sim::PlanCandidate& c : result.candidates) {
    if (c.on_frontier) frontier.push_back(&c);
    if (static_cast<int>(fastest.size()) < o.top) fastest.push_back(&c);
    all.push_back(&c);
  }
  if (!base.lanes.empty()) {
    std::printf("\nfrontier of throughput vs lane value (no plan is both faster and worth more):\n");
    print_rows(frontier, base.lanes);
  }
  std::printf("\n%s:\n", o.all ? "every candidate, fastest first" : "fastest");
  print_rows(o.all ? all : fastest, base.lanes);
}

}  // namespace

int plan_command(int argc, char** argv) {
  PlanOptions o;
  SubcommandOptions options(
      "plan", "--config FILE --cluster FILE [--lanes FILE] [--section.key=value ...] [options]",
      "Searches every way to train the config's model ([model], [train] global_batch as sequences per\n"
      "iteration, seq_len) on the cluster's devices: pipeline stages pp, tensor parallelism tp (within a\n"
      "node), data parallelism dp (the rest), micro batch (hence microbatches m), schedule (gpipe, 1f1b,\n"
      "interleaved with 2 or 4 virtual stages, zb-h1) and layer split (even, and one that gives the\n"
      "head's stage fewer layers), with the memory features: activation recomputation (--recompute),\n"
      "the distributed optimizer (--distributed-optimizer) and sequence parallelism (--sequence-parallel).\n"
      "Each candidate's memory per rank comes from the memory model the trainer sizes its arena with\n"
      "(`pipelane memory`); those that fit a device are simulated with and without the lanes - what\n"
      "recomputation reruns in the backward and the distributed optimizer's reduce-scatter and\n"
      "all-gather priced, and so the bubbles they change - and the frontier of training throughput vs\n"
      "the lanes' value ($ of side work per hour) is printed: once bubbles are worth something, the\n"
      "schedule is a priced decision. [train] recompute and distributed_optimizer are searched, not read.\n"
      "With sites (the cluster's [site.NAME] or [cluster] sites), stages go across the sites in order\n"
      "and each candidate says which site holds which stages; one that would put a tensor-parallel group\n"
      "across sites is refused ([wan] force = true keeps it); [wan] sharing and connections price the\n"
      "cross-site transfers as the executor makes them.\n"
      "Every `pipelane train` key is accepted (--section.key=value); [parallel] keys are ignored.");
  describe(options, o);
  if (const auto code = options.parse(argc, argv, [&] {
        if (!options.given("config"))
          throw OptionError("give --config FILE (a training config: its [model] and [train] global_batch)");
      }))
    return *code;
  try {
    const TrainOptions train = options.train_options();
    if (o.cluster.empty() && train.wan.cluster.empty()) return options.usage_error("give --cluster FILE (or [wan] cluster)");
    const ClusterFile cluster = load_cluster(o.cluster.empty() ? train.wan.cluster : o.cluster);
    const sim::PlanSpace space = plan_space(o, train, cluster);
    const sim::SimulationSetup base = candidate_base(o, options.given("iterations"), train, cluster);
    const auto t0 = std::chrono::steady_clock::now();
    const sim::PlanResult result = sim::plan_jobs(space, base);
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.json) print_json(result);
    else print_tables(o, space, cluster, base, result, wall_s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane plan: %s\n", e.what());
    return 2;
  }
}

}  // namespace pipelane
