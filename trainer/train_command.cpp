#include "trainer/train_command.h"

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "datasets/data_error.h"
#include "datasets/token_store.h"
#include "datasets/unigram.h"
#include "parallel/mpi_communicator.h"
#include "runtime/backend.h"
#include "runtime/backend_registry.h"
#include "trainer/preemption.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_numerics.h"
#include "trainer/parallel_trainer.h"
#include "trainer/train_options.h"
#include "trainer/wan_setup.h"
#include "trainer/lane_plan.h"
#include "trainer/lane_valuation.h"
#include "trainer/training_data.h"

namespace pipelane {

namespace {

// The grid from the config and the world size; one line naming the keys when impossible.
ParallelDims resolve_dims(const TrainOptions& o, int world) {
  const ParallelOptions& p = o.parallel;
  ParallelDims d{p.tp, p.dp, p.pp};
  const int model_parallel = p.tp * p.pp;
  if (world == 1 && d.world() > 1)
    throw ConfigError("[parallel] tp x dp x pp = " + std::to_string(d.world()) + " ranks: run under mpirun -np " +
                      std::to_string(d.world()));
  if (d.dp == 0) {
    if (world % model_parallel != 0)
      throw ConfigError("world size " + std::to_string(world) + " is not a multiple of [parallel] tp x pp = " +
                        std::to_string(model_parallel));
    d.dp = world / model_parallel;
  }
  if (d.world() != world)
    throw ConfigError("world size " + std::to_string(world) + " is not [parallel] tp x dp x pp = " +
                      std::to_string(d.tp) + " x " + std::to_string(d.dp) + " x " + std::to_string(d.pp) +
                      " = " + std::to_string(d.world()) +
                      (world == 1 ? " (run under mpirun -np " + std::to_string(d.world()) + ")" : ""));
  const int per_replica = o.train.micro_batch * d.dp;
  if (o.train.global_batch % per_replica != 0)
    throw ConfigError("[train] global_batch = " + std::to_string(o.train.global_batch) +
                      " is not a multiple of micro_batch x dp = " + std::to_string(per_replica));
  const int m = o.train.global_batch / per_replica;
  if (p.schedule == "interleaved" && (p.pp < 2 || m % p.pp != 0))
    throw ConfigError("[parallel] schedule = interleaved needs pp >= 2 and microbatches per replica (" +
                      std::to_string(m) + " = global_batch / (micro_batch x dp)) a multiple of pp = " +
                      std::to_string(p.pp));
  return d;
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  return buf;
}

// Test hook for fault handling: PIPELANE_FAULT_KILL="RANK:STEP" makes that rank SIGKILL itself
// at that step, as a crashed node would.
void maybe_inject_fault(int rank) {
  const char* spec = std::getenv("PIPELANE_FAULT_KILL");
  if (!spec) return;
  int r = -1, delay_ms = 0;
  if (std::sscanf(spec, "%d:%d", &r, &delay_ms) == 2 && r == rank) {
    std::thread([delay_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      std::raise(SIGKILL);
    }).detach();
  }
}

void print_summary(const TrainOptions& opts, const nlohmann::json& summary, double unigram) {
  std::printf("\nSummary\n");
  std::printf("  trained      %d steps, %.2fM tokens in %.1f s: %.0f tokens/s, MFU %.1f%%\n",
              opts.train.steps, summary["tokens"].get<double>() / 1e6,
              summary["train_seconds"].get<double>(), summary["tokens_per_s"].get<double>(),
              100.0 * summary["mfu"].get<double>());
  const auto& par = summary["parallel"];
  if (par["pp"].get<int>() * par["tp"].get<int>() * par["dp"].get<int>() > 1 || par["pp"].get<int>() > 1)
    std::printf("  parallel     tp %d x dp %d x pp %d, %s, %d microbatches: bubble %.1f%% measured, %.1f%% theoretical\n",
                par["tp"].get<int>(), par["dp"].get<int>(), par["pp"].get<int>(),
                par["schedule"].get<std::string>().c_str(), par["microbatches"].get<int>(),
                100 * summary["bubble_fraction_measured"].get<double>(),
                100 * summary["bubble_fraction_theoretical"].get<double>());
  if (summary.contains("lanes") && summary["lanes"].is_object()) {
    const auto& t = summary["lanes"]["total"];
    std::printf("  lanes        harvested %.2f s of %.2f s of waits (%.0f%%; %.0f%% after the profile iterations), "
                "overrun %.3f s\n",
                t["harvested_s"].get<double>(), t["bubble_s"].get<double>(),
                100 * t["harvest_fraction"].get<double>(), 100 * t.value("harvest_fraction_after_profiling", 0.0),
                t["overrun_s"].get<double>());
    for (const auto& [name, l] : t["lanes"].items())
      std::printf("    %-10s %.4g %s in %.2f s of lane time\n", name.c_str(), l["units"].get<double>(),
                  l.value("work_unit", std::string("units")).c_str(), l["lane_s"].get<double>());
    if (t.contains("overhead") && t["overhead"].is_object())
      std::printf("    overhead   %+.1f%% training time vs the lanes-off run (median step %+.1f%%)\n",
                  100 * t["overhead"]["fraction"].get<double>(),
                  100 * t["overhead"]["step_median_fraction"].get<double>());
    if (t.contains("cost_saving") && t["cost_saving"].is_object()) {
      const auto& c = t["cost_saving"];
      char net[64] = "unknown (no [lanes] baseline)";
      if (c["net_fraction"].is_number()) std::snprintf(net, sizeof net, "%.1f%%", 100 * c["net_fraction"].get<double>());
      std::printf("    saving     gross %.1f%%, net %s: lane work worth %.1f device-s alone (at %.3gx the training "
                  "device's price), over %.1f device-s of training\n",
                  100 * c["gross_fraction"].get<double>(), net, c["value_device_s"].get<double>(),
                  c["price_ratio"].get<double>(), c["training_device_s"].get<double>());
    }
    for (const auto& q : t["quarantined"])
      std::printf("    quarantined: %s on rank %d: %s\n", q["lane"].get<std::string>().c_str(),
                  static_cast<int>(q["rank"].get<double>()), q["reason"].get<std::string>().c_str());
  }
  std::printf("  train loss   %.4f (final step)\n", summary["final_loss"].get<double>());
  if (!summary["final_val_loss"].is_null()) {
    const double val = summary["final_val_loss"].get<double>();
    std::printf("  val loss     %.4f nats/token vs unigram baseline %.4f: %s\n", val, unigram,
                val < unigram ? "the model beats the unigram model" : "NOT below the unigram model");
  }
  std::printf("  run dir      %s (config.ini, metrics.jsonl, trace.json, summary.json)\n",
              opts.run.dir.c_str());
}

}  // namespace

int train_command(int argc, char** argv) {
  std::unique_ptr<MpiSession> mpi;
  if (launched_by_mpi_launcher()) {
    try {
      mpi = std::make_unique<MpiSession>(nullptr, nullptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pipelane train: %s\n", e.what());
      return 1;
    }
  }
  const int rank = mpi ? mpi->world_rank() : 0;
  const int world = mpi ? mpi->world_size() : 1;
  const bool leader = rank == 0;

  // Set-up: every rank checks everything before the first collective, then all agree; a rank
  // that failed makes every rank stop with the lowest failing rank's message, printed once.
  TrainOptions opts;
  std::optional<TrainingData> data;
  LaneValuation valuation;
  ParallelDims dims;
  WanSetup wan;
  std::string error;
  int code = 0;
  try {
    opts = parse_train_options(argc, argv);
    if (opts.help_requested) {
      if (leader) std::cout << train_options_help();
      return 0;
    }
    dims = resolve_dims(opts, world);
    wan = wan_setup(opts, dims);
    data.emplace(TrainingData::open(opts));
    valuation = LaneValuation::load(opts, dims.world());
    if (!opts.lanes.plan.empty()) (void)load_lane_plans(opts, dims);  // refused here, before training
  } catch (const ConfigError& e) {
    error = e.what();
    code = 2;
  } catch (const std::exception& e) {
    error = e.what();
    code = 1;
  }
  if (mpi) {
    const RankFailure f = first_failure(error);
    if (f.rank >= 0) {
      if (leader)
        std::fprintf(stderr, "pipelane train: %s%s\n",
                     f.rank == 0 ? "" : ("rank " + std::to_string(f.rank) + ": ").c_str(),
                     f.message.c_str());
      return code ? code : 1;
    }
  } else if (!error.empty()) {
    std::fprintf(stderr, "pipelane train: %s\n", error.c_str());
    return code;
  }

  try {
    Topology topo = mpi ? Topology::from_mpi_world(dims) : Topology::single_process();
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int ranks_here = mpi ? ranks_on_this_host() : 1;
    const int threads = opts.train.threads > 0 ? opts.train.threads : std::max(1, cores / ranks_here);
    // A rank's wait is idle hardware only when it has cores of its own; sharing cores, lane work
    // in a wait takes them from the other ranks' compute (+16-30% at pp=4 on 2 cores).
    if (leader && ranks_here > cores && !opts.lanes.enabled_lanes().empty())
      std::fprintf(stderr,
                   "pipelane train: warning: %d ranks share %d cores on this host, so their waits are not idle "
                   "cores and lane work there slows training\n",
                   ranks_here, cores);
    BackendOptions backend_options;
    backend_options.threads = threads;
    const std::unique_ptr<Backend> backend =
        BackendRegistry::with_builtins().create(opts.runtime.backend, backend_options);
    const double peak = opts.train.peak_gflops > 0 ? opts.train.peak_gflops
                                                   : backend->measure_matmul_gflops(1536, 4);
    ParallelTrainer trainer(opts, *data, topo, peak, *backend);
    // Resume: every rank loads its slice; any rank's failure stops all of them with one message.
    int resumed_at = 0;
    std::optional<std::string> resume_dir;
    {
      std::string resume_error;
      ResumePlan plan;
      try {
        plan = plan_resume({opts.run.dir, opts.run.resume, opts.run.overwrite}, *topo.world);
        resume_dir = plan.dir;
      } catch (const std::exception& e) {
        resume_error = e.what();
      }
      if (leader)
        for (const std::string& note : plan.notes) std::printf("  %s\n", note.c_str());
      try {
        if (resume_dir) resumed_at = trainer.restore(*resume_dir);
      } catch (const std::exception& e) {
        resume_error = std::string(e.what()) + "; " + plan.fallback;
      }
      if (mpi) {
        const RankFailure f = first_failure(resume_error);
        if (f.rank >= 0) {
          if (leader)
            std::fprintf(stderr, "pipelane train: %s%s\n",
                         f.rank == 0 ? "" : ("rank " + std::to_string(f.rank) + ": ").c_str(), f.message.c_str());
          return 1;
        }
      } else if (!resume_error.empty()) {
        std::fprintf(stderr, "pipelane train: %s\n", resume_error.c_str());
        return 1;
      }
    }
    const GptConfig cfg = gpt_config_from(opts.model);
    if (leader) {
      std::printf("pipelane train: %d layers, d_model %d, %d heads, seq_len %d, vocab %d (padded %d): "
                  "%.2fM parameters\n",
                  cfg.layers, cfg.d_model, cfg.heads, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab(),
                  (cfg.non_embedding_params() + double(cfg.padded_vocab() + cfg.max_seq_len) * cfg.d_model) / 1e6);
      std::printf("  %s\n", data->describe().c_str());
      std::printf("  %d rank(s): tp %d x dp %d x pp %d; rank 0: %s, sgemm peak %.0f GFLOP/s%s, "
                  "training arena %s\n",
                  world, dims.tp, dims.dp, dims.pp, backend->name().c_str(), peak,
                  opts.train.peak_gflops > 0 ? " (from config)" : " (measured)",
                  human_bytes(static_cast<double>(trainer.arena_bytes())).c_str());
      if (wan.cluster)
        std::printf("  sites: %s; cross-site transfers: %s\n", wan.placement.describe(wan.sites).c_str(),
                    wan.settings ? (std::string(wan_sharing_name(wan.settings->sharing)) + ", " +
                                    std::to_string(wan.settings->connections) + " connection(s) each")
                                       .c_str()
                                 : "as any other ([wan] sharing = off)");
      for (const std::string& w : wan.warnings) std::fprintf(stderr, "pipelane train: warning: %s\n", w.c_str());
      const std::string transport = wan_transport_mismatch(wan);
      if (!transport.empty()) std::fprintf(stderr, "pipelane train: warning: %s\n", transport.c_str());
      std::fflush(stdout);
    }
    std::unique_ptr<RunDirectory> run;
    if (leader) {
      // A resumed run keeps the metrics of the steps it resumes after (not those of lost work).
      // RunDirectory truncates metrics.jsonl, so the kept rows sit in metrics.jsonl.resume until
      // they are back: a crash in between leaves them there for the next start.
      std::vector<nlohmann::json> kept;
      const std::string metrics = opts.run.dir + "/metrics.jsonl", saved = metrics + ".resume";
      if (resume_dir) {
        std::ifstream old(std::filesystem::exists(saved) ? saved : metrics);
        std::string text;
        for (std::string line; std::getline(old, line);) {
          try {
            auto row = nlohmann::json::parse(line);
            if (row.value("step", 0) > resumed_at) continue;
            text += row.dump() + "\n";
            kept.push_back(std::move(row));
          } catch (const std::exception&) {  // a line cut short by a crash
          }
        }
        std::error_code made;
        std::filesystem::create_directories(opts.run.dir, made);
        write_file_durably(saved, text);
        std::printf("  resuming from %s (step %d)\n", resume_dir->c_str(), resumed_at);
        std::fflush(stdout);
      }
      run = std::make_unique<RunDirectory>(opts.run.dir, opts.to_ini());
      for (const auto& row : kept) run->append_metrics(row);
      std::error_code ignored;
      std::filesystem::remove(saved, ignored);
    }
    maybe_inject_fault(rank);
    nlohmann::json summary = trainer.run(run.get(), stdout, valuation);
    if (leader) {
      const double unigram = unigram_cross_entropy(data->main().train(), data->valid(), data->main().meta().vocab_size);
      summary["unigram_val_loss"] = unigram;
      summary["config"] = opts.config_path;
      run->write_summary(summary);
      print_summary(opts, summary, unigram);
    }
    return 0;
  } catch (const Preempted& e) {
    // Every rank agreed to stop after the same step and the checkpoint is complete.
    if (leader) std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return PreemptionSignal::kExitCode;
  } catch (const CheckpointSaveError& e) {
    // Every rank left the save with this same message: no abort needed, one line.
    if (leader) std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return 1;
  } catch (const NumericalFaultError& e) {
    // Every rank judged the same values and stops at the same step: no abort needed.
    if (leader) std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    // Past set-up the other ranks may be inside a collective: end the whole job.
    std::fprintf(stderr, "pipelane train: rank %d: %s\n", rank, e.what());
    if (mpi) mpi->abort(1);
    return 1;
  }
}

}  // namespace pipelane
