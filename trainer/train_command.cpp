#include "trainer/train_command.h"

#include <unistd.h>

#include <algorithm>
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
#include "parallel/device_planes.h"
#include "parallel/mpi_communicator.h"
#include "runtime/backend.h"
#include "runtime/backend_registry.h"
#include "trainer/preemption.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_numerics.h"
#include "trainer/machine_peak.h"
#include "trainer/parallel_trainer.h"
#include "trainer/text_tokenizer.h"
#include "trainer/train_options.h"
#include "trainer/wan_setup.h"
#include "trainer/lane_plan.h"
#include "trainer/lane_valuation.h"
#include "trainer/training_data.h"

namespace pipelane {

namespace {

// The grid from the config and the world size; one line naming the keys when impossible.
// "use -np 4 for tp 2 x pp 2": what a wrong world size should have been.
std::string np_hint(const ParallelOptions& p) {
  const int dp = std::max(1, p.dp), n = p.tp * p.pp * dp;
  std::string grid;
  for (const auto& [name, v] : {std::pair<const char*, int>{"tp", p.tp}, {"dp", p.dp}, {"pp", p.pp}})
    if (v > 1) grid += std::string(grid.empty() ? "" : " x ") + name + " " + std::to_string(v);
  std::string hint = "use -np " + std::to_string(n) + " for " + (grid.empty() ? "one process" : grid);
  if (p.dp == 0)
    hint += " (or -np " + std::to_string(2 * n) + ", " + std::to_string(3 * n) + ", ... for data parallelism)";
  return hint;
}

ParallelDims resolve_dims(const TrainOptions& o, int world) {
  const ParallelOptions& p = o.parallel;
  ParallelDims d{p.tp, p.dp, p.pp};
  const int model_parallel = p.tp * p.pp;
  if (world == 1 && d.world() > 1)
    throw ConfigError("[parallel] tp x dp x pp = " + std::to_string(d.world()) + " ranks: run under mpirun: " +
                      np_hint(p));
  if (d.dp == 0) {
    if (world % model_parallel != 0)
      throw ConfigError("world size " + std::to_string(world) + " is not a multiple of [parallel] tp x pp = " +
                        std::to_string(model_parallel) + ": " + np_hint(p));
    d.dp = world / model_parallel;
  }
  if (d.world() != world)
    throw ConfigError("world size " + std::to_string(world) + " is not [parallel] tp x dp x pp = " +
                      std::to_string(d.tp) + " x " + std::to_string(d.dp) + " x " + std::to_string(d.pp) +
                      " = " + std::to_string(d.world()) + ": " + np_hint(p));
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

// 123, 45.6k, 819.20M: small runs are not "0.00M tokens".
std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e4) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

// Tokens held in memory (uint32 each): every training split and the validation split.
double token_bytes(const TrainingData& data) {
  double tokens = static_cast<double>(data.valid().tokens.size());
  for (const WeightedSplit& w : data.train_splits()) tokens += static_cast<double>(w.split->tokens.size());
  return tokens * sizeof(std::uint32_t);
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

// The backend named by [runtime] backend, with this rank's share of the host: CPU threads, or the
// GPU of its local rank when the config says `cuda` without an index (one process per GPU), in
// the compute precision of [train] precision (a backend without a bf16 mode refuses bf16).
// BackendUnavailable or ConfigError, one line.
std::unique_ptr<Backend> make_training_backend(const TrainOptions& opts, int ranks_here, int local_rank,
                                               int* device) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  BackendOptions o;
  o.threads = opts.train.threads > 0 ? opts.train.threads : std::max(1, cores / ranks_here);
  o.lane_sm_partition = opts.lanes.sm_partition;
  // bf16 is the backend's compute precision (autocast-style GEMM operands, runtime/backend.h):
  // the model and executor keep fp32 buffers either way.
  o.compute = opts.train.precision == "bf16" ? DType::BF16 : DType::F32;
  o.cudnn_attention = opts.model.attention == "cudnn";
  std::string spec = opts.runtime.backend;
  if (spec == "cuda") spec += ":" + std::to_string(local_rank);
  std::unique_ptr<Backend> backend = BackendRegistry::with_builtins().create(spec, o);
  *device = spec.rfind("cuda:", 0) == 0 ? std::stoi(spec.substr(5)) : 0;
  if (opts.train.precision == "bf16" && backend->compute_precision() != DType::BF16)
    throw ConfigError("[train] precision = bf16: backend " + backend->name() + " has no bf16 compute mode");
  return backend;
}

void print_summary(const TrainOptions& opts, const nlohmann::json& summary, double unigram) {
  std::printf("\nSummary\n");
  const int ran = summary["steps"].get<int>(), first = summary["first_step"].get<int>();
  const int last = summary["last_step"].get<int>();
  std::string which;
  if (first > 1 || last < opts.train.steps)
    which = " (steps " + std::to_string(first) + "-" + std::to_string(last) + " of " + std::to_string(opts.train.steps) +
            (first > 1 ? ", resumed from step " + std::to_string(first - 1) : "") +
            (last < opts.train.steps ? ", stopped early" : "") + ")";
  std::printf("  trained      %d step%s%s, %s tokens in %.1f s: %.0f tokens/s\n", ran, ran == 1 ? "" : "s", which.c_str(),
              human_count(summary["tokens"].get<double>()).c_str(), summary["train_seconds"].get<double>(),
              summary["tokens_per_s"].get<double>());
  std::printf("  MFU          %.1f%% of %s (%.0f GFLOP/s per rank)", 100.0 * summary["mfu"].get<double>(),
              summary["peak_source"].get<std::string>().c_str(), summary["peak_gflops"].get<double>());
  if (!summary["mfu_sgemm"].is_null())
    std::printf("; %.1f%% of a measured sgemm (%.0f GFLOP/s)", 100.0 * summary["mfu_sgemm"].get<double>(),
                summary["peak_gflops_sgemm"].get<double>());
  std::printf("\n");
  const auto& par = summary["parallel"];
  if (par["pp"].get<int>() * par["tp"].get<int>() * par["dp"].get<int>() > 1 || par["pp"].get<int>() > 1)
    std::printf("  parallel     tp %d x dp %d x pp %d, %s, %d microbatches: bubble %.1f%% measured, %.1f%% theoretical\n",
                par["tp"].get<int>(), par["dp"].get<int>(), par["pp"].get<int>(),
                par["schedule"].get<std::string>().c_str(), par["microbatches"].get<int>(),
                100 * summary["bubble_fraction_measured"].get<double>(),
                100 * summary["bubble_fraction_theoretical"].get<double>());
  if (summary["straggler"].is_object())
    std::printf("  straggler    %s\n", summary["straggler"]["message"].get<std::string>().c_str());
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
  std::printf("  run dir      %s (config.ini, metrics.jsonl, trace.json, summary.json%s)\n", opts.run.dir.c_str(),
              opts.train.sample_every > 0 ? ", samples.jsonl" : "");
  if (summary["traced_steps"].is_array())
    std::printf("  trace.json   steps %d-%d ([run] trace_steps)\n", summary["traced_steps"][0].get<int>(),
                summary["traced_steps"][1].get<int>());
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
  // Collectives: every rank runs them before anything can fail.
  const int ranks_here = mpi ? ranks_on_this_host() : 1;
  const int local_rank = mpi ? local_rank_on_this_host() : 0;

  // Set-up: every rank checks everything before the first collective, then all agree; a rank
  // that failed makes every rank stop with the lowest failing rank's message, printed once.
  TrainOptions opts;
  std::optional<TrainingData> data;
  LaneValuation valuation;
  ParallelDims dims;
  std::unique_ptr<Backend> backend;
  int device = 0;
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
    backend = make_training_backend(opts, ranks_here, local_rank, &device);
    wan = wan_setup(opts, dims);
    data.emplace(TrainingData::open(opts));
    if (opts.train.sample_every > 0) {
      try {
        TextTokenizer::load(opts.data.tokenizer);
      } catch (const std::exception& e) {
        throw ConfigError(std::string("[train] sample_every needs the tokenizer: ") + e.what());
      }
    }
    if (!opts.run.init_from.empty() && !std::filesystem::is_directory(opts.run.init_from))
      throw ConfigError("[run] init_from = " + opts.run.init_from + ": no such directory");
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
    Topology topo = mpi ? Topology::from_mpi_world(dims, *backend, device) : Topology::single_process(*backend);
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    // A rank's wait is idle hardware only when it has cores of its own; sharing cores, lane work
    // in a wait takes them from the other ranks' compute (+16-30% at pp=4 on 2 cores).
    if (leader && ranks_here > cores && !opts.lanes.enabled_lanes().empty())
      std::fprintf(stderr,
                   "pipelane train: warning: %d ranks share %d cores on this host, so their waits are not idle "
                   "cores and lane work there slows training\n",
                   ranks_here, cores);
    // MFU against the hardware's peak (or [train] peak_gflops), and a cached measured sgemm beside it.
    // (On a GPU backend the CPU's peak says nothing: give [train] peak_gflops.)
    const int threads = std::max(1, backend->threads());
    MfuPeaks peaks;
    const double rank_cores = std::min<double>(threads, static_cast<double>(cores) / ranks_here);
    if (opts.train.peak_gflops > 0) {
      peaks.gflops = opts.train.peak_gflops;
      peaks.source = "[train] peak_gflops";
    } else {
      const CpuPeak hw = cpu_hardware_peak(rank_cores);
      peaks.gflops = hw.gflops;
      peaks.source = "the hardware peak: " + hw.how;
    }
    if (const auto sgemm = sgemm_peak(threads, ranks_here, opts.train.peak_gflops <= 0 ? backend.get() : nullptr)) {
      peaks.sgemm_gflops = sgemm->gflops;
      peaks.sgemm_source = sgemm->how;
    }
    ParallelTrainer trainer(opts, *data, topo, peaks.gflops, *backend);
    trainer.set_mfu_peaks(peaks);
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
      try {
        if (!resume_dir && !opts.run.init_from.empty()) trainer.init_from(opts.run.init_from);
      } catch (const std::exception& e) {
        resume_error = e.what();
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
      std::printf("  %d rank(s): tp %d x dp %d x pp %d; rank 0: %s, peak %.0f GFLOP/s (%s)\n", world, dims.tp,
                  dims.dp, dims.pp, backend->name().c_str(), peaks.gflops, peaks.source.c_str());
      if (peaks.sgemm_gflops)
        std::printf("  measured sgemm %.0f GFLOP/s per rank (%s)\n", *peaks.sgemm_gflops, peaks.sgemm_source.c_str());
      if (wan.cluster)
        std::printf("  sites: %s; cross-site transfers: %s\n", wan.placement.describe(wan.sites).c_str(),
                    wan.settings ? (std::string(wan_sharing_name(wan.settings->sharing)) + ", " +
                                    std::to_string(wan.settings->connections) + " connection(s) each")
                                       .c_str()
                                 : "as any other ([wan] sharing = off)");
      for (const std::string& w : wan.warnings) std::fprintf(stderr, "pipelane train: warning: %s\n", w.c_str());
      const std::string transport = wan_transport_mismatch(wan);
      if (!transport.empty()) std::fprintf(stderr, "pipelane train: warning: %s\n", transport.c_str());
    }
    {  // The memory this job takes, before step 1: every rank's arena, lane quotas and token data.
      const double lanes_here = opts.lanes.runs_on_stage(topo.me.pp)
                                    ? std::min<double>(opts.lanes.stage_memory_mb,
                                                       opts.lanes.memory_mb * static_cast<double>(opts.lanes.enabled_lanes().size()))
                                    : 0.0;
      double mine[3] = {static_cast<double>(trainer.arena_bytes()), lanes_here * (1 << 20),
                        token_bytes(*data)};
      double most[3] = {mine[0], mine[1], mine[2]}, total[3] = {mine[0], mine[1], mine[2]};
      topo.world->all_reduce_sum(total, 3);
      for (int k = 0; k < 3; ++k) {  // the largest rank: max through a sum of one-hot vectors
        std::vector<double> v(static_cast<std::size_t>(world), 0.0);
        v[rank] = mine[k];
        topo.world->all_reduce_sum(v.data(), v.size());
        most[k] = *std::max_element(v.begin(), v.end());
      }
      if (leader)
        std::printf("  memory: %s on the largest rank (training arena %s%s, token data %s); %s for all %d rank(s)\n",
                    human_bytes(most[0] + most[1] + most[2]).c_str(), human_bytes(most[0]).c_str(),
                    most[1] > 0 ? (", lanes up to " + human_bytes(most[1])).c_str() : "",
                    human_bytes(most[2]).c_str(), human_bytes(total[0] + total[1] + total[2]).c_str(), world);
    }
    if (leader) {
      if (!resume_dir && !opts.run.init_from.empty())
        std::printf("  initialised from %s ([run] init_from)\n", opts.run.init_from.c_str());
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
      if (summary["mfu_sgemm"].is_number() && summary["mfu_sgemm"].get<double>() > 1.0 &&
          opts.train.peak_gflops <= 0) {
        forget_sgemm_peak(threads, ranks_here);
        std::printf("  note         training outran the cached sgemm rate, so it was measured on a busy machine: "
                    "dropped from the cache (the next run measures again)\n");
      }
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
