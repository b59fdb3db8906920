#include "trainer/cli/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
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
#include "trainer/run/preemption.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/run/step_guard.h"
#include "trainer/run/machine_peak.h"
#include "trainer/cli/memory_command.h"
#include "trainer/run/parallel_trainer.h"
#include "trainer/hf/text_tokenizer.h"
#include "trainer/config/train_options.h"
#include "trainer/config/wan_setup.h"
#include "trainer/run/lane_plan.h"
#include "trainer/run/lane_valuation.h"
#include "trainer/run/training_data.h"
#include "trainer/cli/run_summary_console.h"

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
  const int m = microbatches_per_replica(o.train, d.dp);
  if (p.schedule == "interleaved" && (p.pp < 2 || m % p.pp != 0))
    throw ConfigError("[parallel] schedule = interleaved needs pp >= 2 and microbatches per replica (" +
                      std::to_string(m) + " = global_batch / (micro_batch x dp)) a multiple of pp = " +
                      std::to_string(p.pp));
  return d;
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

// This process's place in the job: its world rank, the world, and its share of the host.
struct Job {
  std::unique_ptr<MpiSession> mpi;  // null without mpirun
  int rank = 0, world = 1;
  int ranks_here = 1, local_rank = 0;  // ranks sharing this host, and this one's index among them
  bool leader() const { return rank == 0; }
};

// What every rank checks before the first collective (set_up).
struct TrainSetup {
  TrainOptions opts;
  std::optional<TrainingData> data;
  LaneValuation valuation;
  ParallelDims dims;
  std::unique_ptr<Backend> backend;
  int device = 0;
  WanSetup wan;
};

// Throws ConfigError (exit code 2) or another exception (1), one line.
void set_up(const Job& job, TrainSetup& s) {
  s.dims = resolve_dims(s.opts, job.world);
  s.backend = make_training_backend(s.opts, job.ranks_here, job.local_rank, &s.device);
  s.wan = wan_setup(s.opts, s.dims);
  s.data.emplace(TrainingData::open(s.opts));
  if (s.opts.train.sample_every > 0) {
    try {
      TextTokenizer::load(s.opts.data.tokenizer);
    } catch (const std::exception& e) {
      throw ConfigError(std::string("[train] sample_every needs the tokenizer: ") + e.what());
    }
  }
  if (!s.opts.run.init_from.empty() && !std::filesystem::is_directory(s.opts.run.init_from))
    throw ConfigError("[run] init_from = " + s.opts.run.init_from + ": no such directory");
  s.valuation = LaneValuation::load(s.opts, s.dims.world());
  if (!s.opts.lanes.plan.empty()) (void)load_lane_plans(s.opts, s.dims);  // refused here, before training
}

// Every rank with its own `error` ("" when it has none) agrees with the others: when any failed,
// rank 0 prints the lowest failing rank's message once and every rank gets the exit code (`code`
// where this rank failed, else 1). nullopt when none failed.
std::optional<int> stop_on_failure(const Job& job, const std::string& error, int code) {
  if (job.mpi) {
    const RankFailure f = first_failure(error);
    if (f.rank < 0) return std::nullopt;
    if (job.leader())
      std::fprintf(stderr, "pipelane train: %s%s\n", f.rank == 0 ? "" : ("rank " + std::to_string(f.rank) + ": ").c_str(),
                   f.message.c_str());
    return code ? code : 1;
  }
  if (error.empty()) return std::nullopt;
  std::fprintf(stderr, "pipelane train: %s\n", error.c_str());
  return code;
}

// MFU against one peak (run/machine_peak.h: [train] peak_gflops, else the hardware's unless a
// measured sgemm contradicts it), and the cached measured sgemm beside it.
// (On a GPU backend the CPU's peak says nothing: give [train] peak_gflops.)
MfuPeaks mfu_peaks(const TrainOptions& opts, Backend& backend, int ranks_here) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = std::max(1, backend.threads());
  MfuPeaks peaks;
  const double rank_cores = std::min<double>(threads, static_cast<double>(cores) / ranks_here);
  if (const auto sgemm = sgemm_peak(threads, ranks_here, opts.train.peak_gflops <= 0 ? &backend : nullptr)) {
    peaks.sgemm_gflops = sgemm->gflops;
    peaks.sgemm_source = sgemm->how;
  }
  const MfuPeakChoice peak = choose_mfu_peak(opts.train.peak_gflops, cpu_hardware_peak(rank_cores), peaks.sgemm_gflops);
  peaks.gflops = peak.gflops;
  peaks.source = peak.source;
  return peaks;
}

// Where training starts: a checkpoint resumed (its step), [run] init_from, or fresh.
struct Start {
  std::optional<std::string> resume_dir;
  int resumed_at = 0;
};

// Every rank loads its slice; any rank's failure stops all of them with one message (then
// nullopt: exit code 1). Rank 0 prints the resume plan's notes.
std::optional<Start> start_training(const Job& job, const TrainOptions& opts, Topology& topo,
                                        ParallelTrainer& trainer) {
  Start start;
  std::string error;
  ResumePlan plan;
  try {
    plan = plan_resume({opts.run.dir, opts.run.resume, opts.run.overwrite}, *topo.world);
    start.resume_dir = plan.dir;
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (job.leader())
    for (const std::string& note : plan.notes) std::printf("  %s\n", note.c_str());
  try {
    if (start.resume_dir) start.resumed_at = trainer.restore(*start.resume_dir);
  } catch (const std::exception& e) {
    error = std::string(e.what()) + "; " + plan.fallback;
  }
  try {
    if (!start.resume_dir && !opts.run.init_from.empty()) trainer.init_from(opts.run.init_from);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (stop_on_failure(job, error, 1)) return std::nullopt;
  return start;
}

// Rank 0: the model, the data, the grid, the peaks, the sites; warnings on stderr.
void print_run_header(const TrainSetup& s, const MfuPeaks& peaks, int world) {
  const GptConfig cfg = gpt_config_from(s.opts.model);
  std::printf("pipelane train: %d layers, d_model %d, %d heads, seq_len %d, vocab %d (padded %d): "
              "%.2fM parameters\n",
              cfg.layers, cfg.d_model, cfg.heads, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab(),
              (cfg.non_embedding_params() + double(cfg.padded_vocab() + cfg.max_seq_len) * cfg.d_model) / 1e6);
  std::printf("  %s\n", s.data->describe().c_str());
  std::printf("  %d rank(s): tp %d x dp %d x pp %d; rank 0: %s, peak %.0f GFLOP/s (%s)\n", world, s.dims.tp,
              s.dims.dp, s.dims.pp, s.backend->name().c_str(), peaks.gflops, peaks.source.c_str());
  if (s.opts.train.distributed_optimizer)
    std::printf("  distributed optimizer: %s\n",
                s.dims.dp > 1 ? ("AdamW state sharded over the " + std::to_string(s.dims.dp) + " dp ranks").c_str()
                              : "dp 1, nothing to shard: the replicated optimizer");
  if (peaks.sgemm_gflops)
    std::printf("  measured sgemm %.0f GFLOP/s per rank (%s)\n", *peaks.sgemm_gflops, peaks.sgemm_source.c_str());
  const WanSetup& wan = s.wan;
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

// Collective: the memory this job takes, before step 1 (every rank's arena, lane quotas and token
// data), printed by rank 0.
void print_memory(const Job& job, const TrainSetup& s, const Topology& topo, const ParallelTrainer& trainer) {
  const LanesOptions& lanes = s.opts.lanes;
  const double lanes_here =
      lanes.runs_on_stage(topo.me.pp)
          ? std::min<double>(lanes.stage_memory_mb, lanes.memory_mb * static_cast<double>(lanes.enabled_lanes().size()))
          : 0.0;
  double mine[3] = {static_cast<double>(trainer.arena_bytes()), lanes_here * (1 << 20), token_bytes(*s.data)};
  double most[3] = {mine[0], mine[1], mine[2]}, total[3] = {mine[0], mine[1], mine[2]};
  topo.world->all_reduce_sum(total, 3);
  for (int k = 0; k < 3; ++k) {  // the largest rank: max through a sum of one-hot vectors
    std::vector<double> v(static_cast<std::size_t>(job.world), 0.0);
    v[job.rank] = mine[k];
    topo.world->all_reduce_sum(v.data(), v.size());
    most[k] = *std::max_element(v.begin(), v.end());
  }
  if (!job.leader()) return;
  std::printf("  memory: %s on the largest rank (training arena %s%s, token data %s); %s for all %d rank(s)\n",
              human_bytes(most[0] + most[1] + most[2]).c_str(), human_bytes(most[0]).c_str(),
              most[1] > 0 ? (", lanes up to " + human_bytes(most[1])).c_str() : "", human_bytes(most[2]).c_str(),
              human_bytes(total[0] + total[1] + total[2]).c_str(), job.world);
  // The memory features, where any is on (what the arena above was sized for), over the run's dp.
  MemorySpec spec = memory_spec_from(s.opts, 4);
  spec.optimizer_shards = s.opts.train.distributed_optimizer ? topo.grid.dims().dp : 1;
  const std::string features = describe_memory_features(spec);
  if (!features.empty()) std::printf("  memory features: %s\n", features.c_str());
}

// The rows of a JSON-lines file (metrics.jsonl, samples.jsonl) up to `step`: what a run resumed
// after that step keeps of it. A line cut short by a crash is dropped.
std::vector<nlohmann::json> rows_up_to(const std::string& path, int step) {
  std::vector<nlohmann::json> kept;
  std::ifstream old(path);
  for (std::string line; std::getline(old, line);) {
    try {
      auto row = nlohmann::json::parse(line);
      if (row.value("step", 0) <= step) kept.push_back(std::move(row));
    } catch (const std::exception&) {
    }
  }
  return kept;
}

std::string json_lines(const std::vector<nlohmann::json>& rows) {
  std::string text;
  for (const nlohmann::json& row : rows) text += row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return text;
}

// Rank 0's run directory. One rule for its files on a rerun (README, "The run directory"): a fresh
// start replaces them all; a resumed run keeps the rows of metrics.jsonl and samples.jsonl up to the
// step it resumes after (not those of lost work) and appends to them. RunDirectory truncates
// metrics.jsonl, so the kept rows sit in metrics.jsonl.resume until they are back: a crash in
// between leaves them there for the next start.
std::unique_ptr<RunDirectory> open_run_directory(const TrainOptions& opts, const Start& start) {
  std::vector<nlohmann::json> kept;
  const std::string metrics = opts.run.dir + "/metrics.jsonl", saved = metrics + ".resume";
  const std::string samples = opts.run.dir + "/samples.jsonl";
  std::error_code ignored;
  if (start.resume_dir) {
    kept = rows_up_to(std::filesystem::exists(saved) ? saved : metrics, start.resumed_at);
    std::filesystem::create_directories(opts.run.dir, ignored);
    write_file_durably(saved, json_lines(kept));
    if (std::filesystem::exists(samples)) write_file_durably(samples, json_lines(rows_up_to(samples, start.resumed_at)));
    std::printf("  resuming from %s (step %d)\n", start.resume_dir->c_str(), start.resumed_at);
    std::fflush(stdout);
  } else {
    std::filesystem::remove(samples, ignored);
  }
  auto run = std::make_unique<RunDirectory>(opts.run.dir, opts.to_ini());
  for (const auto& row : kept) run->append_metrics(row);
  std::filesystem::remove(saved, ignored);
  return run;
}

// Rank 0, once the run is over: the unigram baseline and the config into the summary, summary.json,
// the console summary, and the sgemm cache dropped when training outran it.
void finish_run(const TrainSetup& s, RunSummary& summary, RunDirectory& run, int ranks_here) {
  TrainingPart& part = *summary.training;
  const TrainingData& data = *s.data;
  part.unigram_val_loss = unigram_cross_entropy(data.main().train(), data.valid(), data.main().meta().vocab_size);
  part.config = s.opts.config_path;
  run.write_summary(summary);
  print_run_summary(s.opts, summary);
  if (part.mfu_sgemm && *part.mfu_sgemm > 1.0 && s.opts.train.peak_gflops <= 0) {
    forget_sgemm_peak(std::max(1, s.backend->threads()), ranks_here);
    std::printf("  note         training outran the cached sgemm rate, so it was measured on a busy machine: "
                "dropped from the cache (the next run measures again)\n");
  }
}

// Past set-up: the run itself. Returns the exit code.
int train(const Job& job, TrainSetup& s) {
  const TrainOptions& opts = s.opts;
  Topology topo = job.mpi ? Topology::from_mpi_world(s.dims, *s.backend, s.device) : Topology::single_process(*s.backend);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  // A rank's wait is idle hardware only when it has cores of its own; sharing cores, lane work
  // in a wait takes them from the other ranks' compute (+16-30% at pp=4 on 2 cores).
  if (job.leader() && job.ranks_here > cores && !opts.lanes.enabled_lanes().empty())
    std::fprintf(stderr,
                 "pipelane train: warning: %d ranks share %d cores on this host, so their waits are not idle "
                 "cores and lane work there slows training\n",
                 job.ranks_here, cores);
  if (job.leader())
    for (const std::string& note : opts.notes) std::fprintf(stderr, "pipelane train: note: %s\n", note.c_str());
  const MfuPeaks peaks = mfu_peaks(opts, *s.backend, job.ranks_here);
  ParallelTrainer trainer(opts, *s.data, topo, peaks.gflops, *s.backend);
  trainer.set_mfu_peaks(peaks);
  const std::optional<Start> started = start_training(job, opts, topo, trainer);
  if (!started) return 1;
  const Start& start = *started;
  // The command of a finished run, run again: auto resume finds its checkpoint at the last step
  // and nothing is left to train. Its summary, metrics and samples stay as they are (a summary of
  // zero steps would replace the real one). Every rank knows the same values, so all return here.
  const bool auto_resume = opts.run.resume == "auto" || opts.run.resume == "auto-skip-damaged";
  if (auto_resume && start.resume_dir && start.resumed_at >= opts.train.steps) {
    if (job.leader())
      std::printf("pipelane train: %s already finished at step %d ([train] steps = %d): nothing to train; its "
                  "summary.json, metrics.jsonl and checkpoints are as they were. --train.steps=N (N > %d) trains "
                  "on from there; --run.resume=none --run.overwrite=archive starts over\n",
                  opts.run.dir.c_str(), start.resumed_at, opts.train.steps, start.resumed_at);
    return 0;
  }
  if (job.leader()) print_run_header(s, peaks, job.world);
  print_memory(job, s, topo, trainer);
  if (job.leader()) {
    if (!start.resume_dir && !opts.run.init_from.empty())
      std::printf("  initialised from %s ([run] init_from)\n", opts.run.init_from.c_str());
    std::fflush(stdout);
  }
  std::unique_ptr<RunDirectory> run = job.leader() ? open_run_directory(opts, start) : nullptr;
  maybe_inject_fault(job.rank);
  RunSummary summary = trainer.run(run.get(), stdout, s.valuation);
  if (job.leader()) finish_run(s, summary, *run, job.ranks_here);
  return 0;
}

}  // namespace

int train_command(int argc, char** argv) {
  Job job;
  if (launched_by_mpi_launcher()) {
    try {
      job.mpi = std::make_unique<MpiSession>(nullptr, nullptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pipelane train: %s\n", e.what());
      return 1;
    }
    job.rank = job.mpi->world_rank();
    job.world = job.mpi->world_size();
    // Collectives: every rank runs them before anything can fail.
    job.ranks_here = ranks_on_this_host();
    job.local_rank = local_rank_on_this_host();
  }

  // Set-up: every rank checks everything before the first collective, then all agree; a rank
  // that failed makes every rank stop with the lowest failing rank's message, printed once.
  TrainSetup setup;
  std::string error;
  int code = 0;
  try {
    // --dry-run: the memory model's prediction for this config (pipelane memory), then stop.
    std::vector<char*> args(argv, argv + argc);
    const auto dry = std::find_if(args.begin(), args.end(), [](const char* a) { return std::strcmp(a, "--dry-run") == 0; });
    const bool dry_run = dry != args.end();
    if (dry_run) args.erase(dry);
    setup.opts = parse_train_options(static_cast<int>(args.size()), args.data());
    if (setup.opts.help_requested) {
      if (job.leader())
        std::cout << train_options_help()
                  << "\n  --dry-run  print each rank's predicted training memory (as pipelane memory) and stop\n";
      return 0;
    }
    if (dry_run) {
      // Under mpirun the world says how many replicas share a distributed optimizer's state.
      TrainOptions predicted = setup.opts;
      if (predicted.parallel.dp == 0 && job.world > 1) predicted.parallel.dp = resolve_dims(predicted, job.world).dp;
      if (job.leader()) print_memory_prediction(predicted, 4, 0, stdout);
      return 0;
    }
    set_up(job, setup);
  } catch (const ConfigError& e) {
    error = e.what();
    code = 2;
  } catch (const std::exception& e) {
    error = e.what();
    code = 1;
  }
  if (const std::optional<int> stop = stop_on_failure(job, error, code)) return *stop;

  try {
    return train(job, setup);
  } catch (const Preempted& e) {
    // Every rank agreed to stop after the same step and the checkpoint is complete.
    if (job.leader()) std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return PreemptionSignal::kExitCode;
  } catch (const CheckpointSaveError& e) {
    // Every rank left the save with this same message: no abort needed, one line.
    if (job.leader()) std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return 1;
  } catch (const NumericalFaultError& e) {
    // Every rank judged the same values and stops at the same step: no abort needed.
    if (job.leader()) std::fprintf(stderr, "pipelane train: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    // Past set-up the other ranks may be inside a collective: end the whole job.
    std::fprintf(stderr, "pipelane train: rank %d: %s\n", job.rank, e.what());
    if (job.mpi) job.mpi->abort(1);
    return 1;
  }
}

}  // namespace pipelane
