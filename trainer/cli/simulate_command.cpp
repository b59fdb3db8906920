#include "trainer/cli/simulate_command.h"

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "parallel/sim/job_memory.h"
#include "parallel/sim/simulation.h"
#include "trainer/run/chrome_trace.h"
#include "trainer/cli/command_options.h"
#include "trainer/sim/sim_inputs.h"
#include "trainer/sim/sim_report.h"
#include "trainer/config/wan_setup.h"

namespace pipelane {

namespace {

namespace po = boost::program_options;

struct SimulateOptions {
  std::string cluster, profile, lanes, out = "runs/simulated";
  int iterations = 0;
  int trace_iterations = 3;
  std::string all_reduce;
  double lane_gap_delay_ms = -1;  // < 0: not given
  bool json = false, quiet = false;
};

void describe(SubcommandOptions& options, SimulateOptions& o) {
  options.accept_train_keys("a `pipelane train` config: the job to simulate (its keys also as --section.key=value)");
  options.add_options()
      ("profile", po::value(&o.profile),
       "a finished `pipelane train` run directory: its config.ini is the default --config, its "
       "summary.json and trace.json the compute costs, and its traced lane steps the lanes")
      ("cluster", po::value(&o.cluster),
       "cluster file (configs/clusters/*.ini: [cluster], [device.NAME], [link.NAME], [site.NAME], "
       "[between.A.B]); default: [wan] cluster, else this machine, one measured core per rank, MPI over "
       "shared memory. Sites: set [wan] sharing (concurrent | temporal) and connections to simulate "
       "the executor's WAN-aware transfers")
      ("lanes", po::value(&o.lanes),
       "lane step-time distributions, JSON lines (`pipelane lane-bench NAME --json`, or stated: "
       "{\"lane\":...,\"step_ms_median\":...}); `none` turns lanes off; default: the profiled run's lanes")
      ("out", value_with_default(&o.out), "directory for summary.json and trace.json")
      ("iterations", po::value(&o.iterations), "iterations to simulate (default: [train] steps)")
      ("trace-iterations", value_with_default(&o.trace_iterations), "iterations written to trace.json")
      ("all-reduce", po::value(&o.all_reduce), "ring, tree or auto (default: the cluster file's, else auto)")
      ("lane-gap-delay-ms", po::value(&o.lane_gap_delay_ms),
       "interference on a CPU: training's extra compute after each gap left to the lanes, in ms "
       "(default: what the profiled run's control gaps measured, summary.json lanes.total.interference; "
       "else 0); stated values are reported as stated")
      ("json", po::bool_switch(&o.json), "print summary.json to stdout instead of the table")
      ("quiet", po::bool_switch(&o.quiet), "print nothing (files only)");
}

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

void print_table(const sim::SimulationSetup& setup, const sim::SimulationOutcome& out, const SimulationSources& src,
                 const RunSummary& summary, const std::string& out_dir) {
  const sim::JobSpec& job = setup.job;
  const ScheduleSpec& spec = job.schedule;
  const sim::JobSimReport& main = out.on ? *out.on : out.off;
  std::printf("simulated: GPT %d layers, d_model %d, %d heads, seq %d, micro batch %d on %s (%d x %s)\n",
              job.model.layers, job.model.d_model, job.model.heads, job.seq_len, job.micro_batch,
              setup.cluster.name.c_str(), setup.cluster.devices(), setup.cluster.device.name.c_str());
  std::printf("  tp %d x dp %d x pp %d = %d devices, %s, %d microbatches%s, %d iterations\n", job.tp, job.dp, spec.pp,
              job.world(), schedule_kind_name(spec.kind), spec.microbatches,
              spec.virtual_stages > 1 ? (", " + std::to_string(spec.virtual_stages) + " virtual stages").c_str() : "",
              setup.iterations);
  const std::string features = describe_memory_features(sim::memory_spec_of(job, setup.cluster.device.precision));
  if (!features.empty())
    std::printf("  memory features: %s (memory per stage from the memory model, reruns and collectives priced)\n",
                features.c_str());
  std::printf("  compute from: %s\n", src.compute.c_str());
  if (out.placement.multi_site()) {
    std::printf("  sites: %s; cross-site transfers: %s\n", out.placement.describe(setup.cluster.site_map()).c_str(),
                setup.wan ? (std::string(wan_sharing_name(setup.wan->sharing)) + ", " +
                             std::to_string(setup.wan->connections) + " connection(s) each")
                                .c_str()
                          : "as the cluster file's links ([wan] sharing = off)");
    for (const std::string& w : placement_warnings(out.placement, setup.force_sites))
      std::printf("  warning: %s\n", w.c_str());
  }
  if (!out.replicas_identical)
    std::printf("  note: data-parallel replicas sit on different kinds of links; the slowest is simulated\n");
  std::printf("iteration %.3f ms (lanes off %.3f ms), %.4g tokens/s, bubble %.4f (theoretical %.4f)\n",
              main.step_s_median * 1e3, out.off.step_s_median * 1e3,
              main.step_s_median > 0 ? job.tokens_per_iteration() / main.step_s_median : 0.0, main.bubble_fraction,
              summary.bubble_fraction_theoretical);
  std::printf("%5s %11s %11s %7s %10s %10s %10s %10s %9s\n", "stage", "busy_ms/it", "idle_ms/it", "bubble", "warmup_ms",
              "p2p_ms", "cooldown_ms", "sync_ms", "mem_GiB");
  const double its = std::max<std::size_t>(1, main.iteration_s.size() - (main.iteration_s.size() > 1));
  const double all_its = static_cast<double>(main.iteration_s.size());
  for (int s = 0; s < spec.pp; ++s) {
    const sim::StageReport& st = main.stages[s];
    std::printf("%5d %11.3f %11.3f %7.4f %10.3f %10.3f %10.3f %10.3f %9.2f\n", s, st.busy_s / its * 1e3,
                st.idle_s / its * 1e3, st.bubble_fraction,
                st.idle_by_kind_s[static_cast<int>(WaitKind::Warmup)] / all_its * 1e3,
                st.idle_by_kind_s[static_cast<int>(WaitKind::P2PWait)] / all_its * 1e3,
                st.idle_by_kind_s[static_cast<int>(WaitKind::Cooldown)] / all_its * 1e3,
                st.idle_by_kind_s[static_cast<int>(WaitKind::SyncWait)] / all_its * 1e3,
                out.stage_memory_bytes[s] / (1024.0 * 1024.0 * 1024.0));
  }
  if (out.on) {
    double bubble = 0, harvested = 0;
    for (const sim::StageReport& st : out.on->stages) {
      bubble += st.bubble_after_profiling_s;
      harvested += st.harvested_after_profiling_s;
    }
    std::printf("lanes (%s): harvest %.1f%% of the bubble after profiling, overhead %.3f%%, cost saving gross "
                "%.2f%% net %.2f%% (training $%.4g/device-h)\n",
                src.lanes.c_str(), bubble > 0 ? 100 * harvested / bubble : 0.0, 100 * out.overhead,
                100 * out.gross_saving, 100 * out.net_saving, out.training_price_per_hour);
    for (std::size_t l = 0; l < setup.lanes.size(); ++l) {
      std::string stages;
      for (int s = 0; s < spec.pp; ++s) {
        if (!out.runs_on[s][l]) continue;
        if (!stages.empty()) stages += ',';
        stages += std::to_string(s);
      }
      std::printf("  %-14s median step %s ms, %.4g %s done, worth $%.4g at $%.4g/h (stages %s)\n",
                  setup.lanes[l].name.c_str(), fmt("%.3g", setup.lanes[l].median_step_s() * 1e3).c_str(),
                  out.values[l].units, setup.lanes[l].work_unit.c_str(), out.values[l].value_usd,
                  out.values[l].price_per_hour, stages.empty() ? "none: no stage has the memory" : stages.c_str());
      const sim::LaneModel& lane = setup.lanes[l];
      double delay_s = 0;
      for (const auto& stage : out.lanes->totals()) delay_s += stage[l].interference_s;
      if (lane.kernel_block_s > 0)
        std::printf("    interference: kernel block %s ms (%s), training waits half a block at each filled gap's "
                    "end: %.4g ms in all\n",
                    fmt("%.3g", lane.kernel_block_s * 1e3).c_str(), lane.kernel_block_source.c_str(), delay_s * 1e3);
    }
    if (setup.lane_settings.lane_gap_delay_s > 0 || !setup.lane_settings.lane_gap_delay_source.empty()) {
      double delay_s = 0;
      long gaps = 0;
      for (std::size_t st = 0; st < out.lanes->lane_gap_delay_s().size(); ++st) {
        delay_s += out.lanes->lane_gap_delay_s()[st];
        gaps += out.lanes->lane_gaps()[st];
      }
      std::printf("  interference (CPU): %s ms after each gap left to the lanes (%s): %.4g ms in all over %ld gaps\n",
                  fmt("%.3g", setup.lane_settings.lane_gap_delay_s * 1e3).c_str(),
                  setup.lane_settings.lane_gap_delay_source.c_str(), delay_s * 1e3, gaps);
    }
  }
  if (!out_dir.empty()) std::printf("wrote %s/summary.json and %s/trace.json\n", out_dir.c_str(), out_dir.c_str());
}

// Where the instruction costs come from: the profiled run (on the machine it was measured on,
// with what a waiting rank took to go on once its data was there: on a busy machine, far more than
// the wire), or the cluster's device table.
void set_compute_costs(const SimulateOptions& o, const std::optional<RunProfile>& run, sim::SimulationSetup& setup,
                       SimulationSources& sources) {
  if (run) {
    setup.profile = run->profile;
    if (o.cluster.empty()) setup.wake_samples = run->profile.wake_samples;
    sources.compute = "profile " + o.profile + (run->had_trace ? " (trace.json means" : " (summary.json means") +
                      (sim::profile_matches(setup.job, run->profile) ? ", as measured)" : ", scaled by FLOPs)");
  } else {
    const sim::DeviceSpec& d = setup.cluster.device;
    sources.compute = "device " + d.name + ": " + fmt("%.4g", d.peak_flops() / 1e12) + " TFLOP/s " +
                      (d.precision == sim::Precision::Bf16 ? "bf16" : "fp32") + " x efficiency " +
                      fmt("%.2f", d.efficiency);
  }
}

// The lanes in the simulated gaps: --lanes, else the profiled run's enabled lanes; on the stages
// [lanes] stages names.
void set_lanes(const SimulateOptions& o, const TrainOptions& options, const std::optional<RunProfile>& run,
               const ClusterFile& cluster, sim::SimulationSetup& setup, SimulationSources& sources) {
  if (o.lanes == "none") {
    sources.lanes = "";
  } else if (!o.lanes.empty()) {
    setup.lanes = load_lane_models(o.lanes, cluster);
    sources.lanes = o.lanes;
  } else if (run && !options.lanes.enabled_lanes().empty()) {
    for (const sim::LaneModel& lane : run->lanes) {
      const auto names = options.lanes.enabled_lanes();
      if (std::find(names.begin(), names.end(), lane.name) != names.end()) setup.lanes.push_back(lane);
    }
    sources.lanes = "steps traced in " + o.profile;
  }
  for (int s = 0; s < setup.job.schedule.pp; ++s)
    if (options.lanes.runs_on_stage(s)) setup.lane_stages.push_back(s);
  if (setup.lane_stages.empty()) setup.lanes.clear();
  setup.lane_settings.margin = options.lanes.margin;
  setup.lane_settings.profile_iterations = options.lanes.profile_iterations;
  setup.lane_settings.seed = options.train.seed;
  if (setup.lanes.empty()) return;
  if (o.lane_gap_delay_ms >= 0) {
    setup.lane_settings.lane_gap_delay_s = o.lane_gap_delay_ms * 1e-3;
    setup.lane_settings.lane_gap_delay_source = "stated (--lane-gap-delay-ms)";
  } else if (run && !run->lane_gap_delay_source.empty() && o.lanes.empty()) {
    // Only for the lanes that run measured it: another lane's working set is another matter.
    setup.lane_settings.lane_gap_delay_s = run->lane_gap_delay_s;
    setup.lane_settings.lane_gap_delay_source = run->lane_gap_delay_source;
  }
}

void write_simulation(const std::string& out_dir, const sim::SimulationSetup& setup,
                      const sim::SimulationOutcome& outcome, const nlohmann::json& summary) {
  std::filesystem::create_directories(out_dir);
  write_chrome_trace(out_dir + "/trace.json", simulation_trace_events(setup, outcome));
  const std::string tmp = out_dir + "/summary.json.tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << summary.dump(2) << "\n";
    if (!f) throw SimInputError(tmp + ": cannot write");
  }
  std::filesystem::rename(tmp, out_dir + "/summary.json");
}

}  // namespace

int simulate_command(int argc, char** argv) {
  SimulateOptions o;
  SubcommandOptions options(
      "simulate",
      "[--config FILE | --profile RUN_DIR] [--cluster FILE] [--lanes FILE]\n"
      "                         [--section.key=value ...] [options]",
      "Replays the job a training config describes - the same per-stage instruction lists the\n"
      "executor runs - under a cost model, with lanes in the simulated gaps, and writes the\n"
      "summary.json fields a real run writes (plus idle time by wait kind and memory per stage) and\n"
      "a trace.json for Perfetto. Every `pipelane train` config key is accepted as in train\n"
      "(--section.key=value; see pipelane train --help); [parallel] dp = 0 fills the cluster.\n\n"
      "Compute costs: --profile RUN_DIR uses a real run's traced instruction times (its steps replayed\n"
      "in turn when the job is the one measured - with the wake-up time of its waiting ranks when no\n"
      "--cluster is given - else their means scaled by FLOPs); without it, FLOPs / (device peak x\n"
      "efficiency) from the cluster's device table. Lane files: one JSON object a line, see README.md\n"
      "(\"Simulating and planning jobs\").");
  describe(options, o);
  if (const auto code = options.parse(argc, argv, [&] {
        if (o.profile.empty() && !options.given("config"))
          throw OptionError("give --config FILE (a training config) or --profile RUN_DIR");
        if (o.trace_iterations < 0) throw OptionError("--trace-iterations must be >= 0");
        if (options.given("lane-gap-delay-ms") && !(o.lane_gap_delay_ms >= 0))
          throw OptionError("--lane-gap-delay-ms must be a number of milliseconds >= 0");
      }))
    return *code;
  try {
    std::optional<RunProfile> run;
    if (!o.profile.empty()) run = load_run_profile(o.profile);
    const TrainOptions train =
        options.train_options(run ? (std::filesystem::path(o.profile) / "config.ini").string() : "");
    const int model_parallel = train.parallel.tp * train.parallel.pp;
    const int wanted = train.parallel.dp > 0 ? model_parallel * train.parallel.dp : model_parallel;
    // --cluster, else the one [wan] names, else this machine.
    const std::string cluster_path = !o.cluster.empty() ? o.cluster : train.wan.cluster;
    ClusterFile cluster = cluster_path.empty() ? this_machine_cluster(wanted) : load_cluster(cluster_path);

    sim::SimulationSetup setup;
    setup.cluster = cluster.cluster;
    setup.job = job_from_options(train, cluster.cluster.devices());
    setup.job.replicas_across_sites = train.wan.placement == "replicas";
    setup.wan = wan_settings(train.wan, cluster.cluster);
    setup.force_sites = train.wan.force;
    setup.all_reduce = o.all_reduce.empty() ? cluster.all_reduce : sim::parse_all_reduce_algorithm(o.all_reduce);
    setup.iterations = options.given("iterations") ? o.iterations : train.train.steps;
    if (setup.iterations < 1) throw SimInputError("--iterations must be >= 1");
    setup.keep_timelines = o.trace_iterations;
    SimulationSources sources;
    sources.cluster = cluster_path.empty() ? "this machine" : cluster_path;
    set_compute_costs(o, run, setup, sources);
    set_lanes(o, train, run, cluster, setup, sources);
    setup.seed = train.train.seed;

    const auto t0 = std::chrono::steady_clock::now();
    const sim::SimulationOutcome outcome = sim::run_simulation(setup);
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RunSummary summary = simulation_summary(setup, outcome, sources);
    summary.simulation->wall_s = wall_s;
    if (!o.out.empty()) write_simulation(o.out, setup, outcome, to_json(summary));
    if (o.json) std::cout << to_json(summary).dump(2) << "\n";
    else if (!o.quiet) print_table(setup, outcome, sources, summary, o.out);
    if (!o.quiet && !o.json) std::printf("simulated in %.3f s\n", wall_s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane simulate: %s\n", e.what());
    return 2;
  }
}

}  // namespace pipelane
