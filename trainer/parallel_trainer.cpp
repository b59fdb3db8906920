#include "trainer/parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "datasets/sharded_sampler.h"
#include "datasets/window_sampler.h"
#include "model/lr_schedule.h"
#include "parallel/pipeline_executor.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_numerics.h"
#include "trainer/preemption.h"
#include "trainer/wan_setup.h"
#include "parallel/progress_watchdog.h"
#include "trainer/chrome_trace.h"
#include "trainer/import_command.h"
#include "trainer/model_gather.h"
#include "trainer/model_source.h"
#include "trainer/progress_line.h"
#include "trainer/stage_lanes.h"
#include "trainer/straggler.h"
#include "trainer/training_samples.h"

namespace pipelane {

GptConfig gpt_config_from(const ModelOptions& m) {
  GptConfig c;
  c.layers = m.layers;
  c.d_model = m.d_model;
  c.heads = m.heads;
  c.max_seq_len = m.seq_len;
  c.vocab_size = m.vocab_size;
  return c;
}

namespace {

// Seconds and counts of each compute instruction (Fwd, Bwd, BwdWeight) over the timed steps.
class ComputeOpTimes {
 public:
  void add(Op op, double seconds) {
    seconds_[index(op)] += seconds;
    counts_[index(op)] += 1;
  }
  // Every rank's totals summed, so every rank has the job's means.
  void sum_over(ControlPlane& world) {
    world.all_reduce_sum(seconds_, kOps);
    world.all_reduce_sum(counts_, kOps);
  }
  double mean(Op op) const { return counts_[index(op)] > 0 ? seconds_[index(op)] / counts_[index(op)] : 0.0; }

 private:
  static constexpr int kOps = 3;
  static int index(Op op) { return op == Op::Fwd ? 0 : op == Op::Bwd ? 1 : 2; }
  double seconds_[kOps] = {0, 0, 0};
  double counts_[kOps] = {0, 0, 0};
};

ExecutorOptions executor_options(const TrainOptions& o, const Topology& t) {
  const int dp = t.grid.dims().dp;
  ExecutorOptions e;
  e.model = gpt_config_from(o.model);
  e.schedule.kind = parse_schedule_kind(o.parallel.schedule);
  e.schedule.pp = o.parallel.pp;
  e.schedule.virtual_stages = o.parallel.virtual_stages;
  e.schedule.microbatches = o.train.global_batch / (o.train.micro_batch * dp);
  e.micro_batch = o.train.micro_batch;
  e.seq_len = o.model.seq_len;
  e.layers_per_stage = o.parallel.layers_per_stage;
  e.seed = o.train.seed;
  e.adamw = {static_cast<float>(o.train.beta1), static_cast<float>(o.train.beta2),
             static_cast<float>(o.train.eps), static_cast<float>(o.train.weight_decay)};
  e.grad_clip = static_cast<float>(o.train.grad_clip);
  e.wan = wan_route_for(wan_setup(o, t.grid.dims()), t.world_rank);
  return e;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Test hooks for checkpoints and fault handling. PIPELANE_STOP_AFTER_STEP=K ends the loop after
// step K (as a preempted job would, after that step's checkpoint); PIPELANE_FAULT_NAN_STEPS=3,4
// makes those 1-based steps see a NaN gradient norm, as an overflowing gradient would.
int stop_after_step() {
  const char* v = std::getenv("PIPELANE_STOP_AFTER_STEP");
  return v ? std::atoi(v) : 0;
}
std::vector<int> injected_nan_steps() {
  std::vector<int> out;
  const char* v = std::getenv("PIPELANE_FAULT_NAN_STEPS");
  if (!v) return out;
  std::stringstream in(v);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::atoi(item.c_str()));
  return out;
}

// The sampler's position in checkpoints: ShardedSampler's (epoch, position in the global stream,
// samples per epoch). The position counts every rank's samples, so a run resumes at any dp.
constexpr const char* kShardedSamplerKind = "sharded_sampler_v1";

// Layers of each pipeline stage, for the straggler's suggestion; empty for interleaved schedules
// (several chunks per stage).
std::vector<int> layers_per_stage(const TrainOptions& o) {
  if (o.parallel.virtual_stages != 1) return {};
  std::vector<int> out;
  std::stringstream in(o.parallel.layers_per_stage);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  if (out.empty()) out.assign(o.parallel.pp, o.model.layers / o.parallel.pp);
  return out;
}

// This rank's lane progress in `reader`, when it can be restored: same grid (tp, pp, dp) and the
// same lane names configured on this world rank as when saved. Otherwise nullopt, with one line
// on stderr saying why (training state restores either way; the lanes start fresh).
std::optional<std::map<std::string, std::string>> saved_lane_progress(const CheckpointReader& reader,
                                                                      const Topology& topo,
                                                                      GapScheduler* lanes) {
  const int rank = topo.world_rank;
  const auto skip = [&](const std::string& why) -> std::optional<std::map<std::string, std::string>> {
    std::fprintf(stderr, "pipelane lanes: rank %d: saved lane state not restored: %s; lanes start fresh\n",
                 rank, why.c_str());
    return std::nullopt;
  };
  if (!lanes) {  // say so only where this rank has saved state to drop
    bool saved_here = false;
    for (const auto& f : reader.manifest().value("lane_files", nlohmann::json::array()))
      saved_here = saved_here || f.value("rank", -1) == rank;
    return saved_here ? skip("lanes are off on this rank in this run") : std::nullopt;
  }
  if (!reader.has_lane_state()) return skip("checkpoint " + reader.dir() + " holds none (saved with lanes off)");
  const ParallelDims d = topo.grid.dims();
  const nlohmann::json& saved = reader.manifest().at("topology");
  if (saved.value("tp", 0) != d.tp || saved.value("pp", 0) != d.pp || saved.value("dp", 0) != d.dp)
    return skip("saved on grid tp " + std::to_string(saved.value("tp", 0)) + " x dp " +
                std::to_string(saved.value("dp", 0)) + " x pp " + std::to_string(saved.value("pp", 0)) +
                ", this run is tp " + std::to_string(d.tp) + " x dp " + std::to_string(d.dp) + " x pp " +
                std::to_string(d.pp));
  std::optional<LaneStates> mine = reader.lane_states(rank);
  const std::vector<std::string> names = lanes->lane_names();
  const auto joined = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& n : v) out += (out.empty() ? "" : ",") + n;
    return out.empty() ? std::string("none") : out;
  };
  if (!mine) return skip("this rank saved none");
  if (mine->lanes != names)
    return skip("saved with lanes " + joined(mine->lanes) + ", this run has " + joined(names));
  return std::move(mine->states);
}

}  // namespace

struct ParallelTrainer::State {
  const TrainOptions& opts;
  const TrainingData& data;
  Topology& topo;
  MfuPeaks peaks;
  int dp, B, T, micro_total, micro_mine;
  ExecutorOptions exec_opts;
  PipelineExecutor exec;
  ShardedSampler sampler;
  int start_step = 0;
  StepGuard guard;
  std::vector<std::int32_t> all_tokens, all_targets, eval_tokens, eval_targets;

  StageLanes lanes;
  // Lane progress from the checkpoint restored, loaded in run() before calibration (nullopt: none).
  std::optional<std::map<std::string, std::string>> lanes_to_load;

  State(const TrainOptions& o, const TrainingData& d, Topology& t, double peak, Backend& backend)
      : opts(o), data(d), topo(t), peaks{peak, "", std::nullopt, ""}, dp(t.grid.dims().dp),
        B(o.train.micro_batch), T(o.model.seq_len),
        micro_total(o.train.global_batch / o.train.micro_batch), micro_mine(micro_total / dp),
        exec_opts(executor_options(o, t)), exec(exec_opts, t, backend),
        sampler(d.train_splits(), SamplerOptions{o.model.seq_len, o.train.seed,
                                          parse_sample_mode(o.data.sample_mode), t.me.dp,
                                          t.grid.dims().dp}),
        guard(StepGuardOptions{o.train.max_bad_steps, o.train.loss_spike_zscore}),
        lanes(o, t, backend, exec.clock_origin()) {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    all_tokens.resize(rows * micro_total);
    all_targets.resize(rows * micro_total);
    eval_tokens.resize(rows * o.train.eval_batches);
    eval_targets.resize(rows * o.train.eval_batches);
  }

  // This replica's share of the global batch: the sampler hands global sample g to dp rank
  // g mod dp, so the replicas together see exactly the samples one process would (every tp and
  // pp rank of a replica draws the same ones).
  void draw_batch() {
    sampler.next_batch(micro_mine * B, all_tokens.data(), all_targets.data());
  }
  CheckpointSamplerState sampler_state() const {
    const SamplerState st = sampler.state();
    return {kShardedSamplerKind, {st.epoch, st.position, st.samples_per_epoch}};
  }
  void restore_sampler(const CheckpointSamplerState& st) {
    if (st.kind != kShardedSamplerKind || st.words.size() != 3)
      throw CheckpointError("the checkpoint's sampler state is '" + st.kind + "', which this sampler cannot restore");
    sampler.restore(SamplerState{st.words[0], st.words[1], st.words[2]});
  }
  TrainingProgress progress(int step, const LrSchedule& schedule) const {
    TrainingProgress p;
    p.step = step;
    const TrainLoopOptions& t = opts.train;
    p.lr_schedule = {{"lr", t.lr}, {"min_lr", t.min_lr}, {"warmup_steps", t.warmup_steps},
                     {"steps", t.steps}, {"next_lr", schedule.at(step)}};
    p.sampler = sampler_state();
    p.guard = guard.state;
    return p;
  }
  void save(int step, const LrSchedule& schedule) {
    const ParallelDims d = topo.grid.dims();
    const nlohmann::json topology = {{"tp", d.tp}, {"pp", d.pp}, {"dp", d.dp},
                                     {"schedule", opts.parallel.schedule},
                                     {"virtual_stages", opts.parallel.virtual_stages},
                                     {"layers_per_stage", opts.parallel.layers_per_stage}};
    std::optional<LaneStates> lane_states;
    if (GapScheduler* g = lanes.scheduler()) lane_states = LaneStates{g->lane_names(), g->save_lanes()};
    save_checkpoint(opts.run.dir + "/checkpoints", step, exec, topo, progress(step, schedule),
                    exec_opts.model, topology, opts.to_ini(), opts.run.keep_last,
                    lane_states ? &*lane_states : nullptr);
  }
  const std::int32_t* mine(const std::vector<std::int32_t>& v) const { return v.data(); }

  double evaluate() {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    const int n = opts.train.eval_batches;
    for (int i = 0; i < n; ++i)
      fill_eval_batch(data.valid(), T, B, i, eval_tokens.data() + i * rows, eval_targets.data() + i * rows);
    return exec.evaluate_sum(eval_tokens.data(), eval_targets.data(), n) / (static_cast<double>(n) * rows);
  }
};

ParallelTrainer::ParallelTrainer(const TrainOptions& opts, const TrainingData& data, Topology& topo,
                                 double peak_gflops, Backend& backend)
    : s_(std::make_unique<State>(opts, data, topo, peak_gflops, backend)) {}
ParallelTrainer::~ParallelTrainer() = default;
std::size_t ParallelTrainer::arena_bytes() const { return s_->exec.arena_bytes(); }

int ParallelTrainer::restore(const std::string& checkpoint_dir) {
  State& s = *s_;
  CheckpointReader reader(checkpoint_dir);
  reader.check_model(s.exec_opts.model);
  const TrainingProgress p = reader.progress();
  if (p.sampler.kind == kWeightsOnlySampler)
    throw CheckpointError("checkpoint " + checkpoint_dir + " holds weights only (pipelane import): start from it with " +
                          "[run] init_from = " + checkpoint_dir + " instead of resume");
  if (p.step > s.opts.train.steps)
    throw CheckpointError("checkpoint " + checkpoint_dir + " is at step " + std::to_string(p.step) +
                          ", beyond [train] steps = " + std::to_string(s.opts.train.steps));
  load_training_memory(reader, training_memory(s.exec));
  s.restore_sampler(p.sampler);
  s.guard.state = p.guard;
  s.start_step = p.step;
  s.lanes_to_load = saved_lane_progress(reader, s.topo, s.lanes.scheduler());
  return p.step;
}

void ParallelTrainer::init_from(const std::string& path) {
  State& s = *s_;
  const LoadedModel m = load_model(path);
  const std::string diff = model_mismatch(m.config, s.exec_opts.model);
  if (!diff.empty()) throw CheckpointError("[run] init_from = " + path + ": the model there has " + diff);
  std::vector<float> staging;  // the weights are written on the host, then copied in
  for (const ChunkState& c : s.exec.chunk_states()) {
    staging.assign(c.layout->total_floats(), 0.f);
    copy_model_into(m, *c.layout, staging.data());
    s.exec.backend().copy(c.params, staging.data(), staging.size() * sizeof(float), s.exec.compute_stream());
  }
  s.exec.compute_stream().synchronize();
}

void ParallelTrainer::set_mfu_peaks(const MfuPeaks& peaks) { s_->peaks = peaks; }

nlohmann::json ParallelTrainer::run(RunDirectory* run, std::FILE* console, const LaneValuation& lane_valuation) {
  State& s = *s_;
  const TrainLoopOptions& t = s.opts.train;
  const bool leader = s.topo.world_rank == 0;
  const LrSchedule schedule{t.lr, t.min_lr, t.warmup_steps, t.steps};
  const double tokens_per_step = static_cast<double>(t.global_batch) * s.T;
  const float loss_scale = static_cast<float>(1.0 / tokens_per_step);
  const double flops_per_token = gpt_config_from(s.opts.model).train_flops_per_token(s.T);

  ProgressLine progress(console ? console : stdout, t.steps, s.opts.run.log_every,
                        s.topo.grid.dims().world() == 1);
  std::vector<StepStats> traced;
  std::vector<int> traced_numbers;  // the 1-based step of each traced StepStats
  const RunOptions::StepRange trace_range = s.opts.run.traced_steps();
  const auto is_traced = [&](int step) {  // 0-based
    return trace_range.first > 0 ? step + 1 >= trace_range.first && step + 1 <= trace_range.last
                                 : step - s.start_step < trace_range.count;
  };
  int steps_run = 0, last_step = s.start_step;
  double step_ewma = 0;  // smoothed step time for the ETA
  const int world_size = s.topo.grid.dims().world();
  const auto mfu_of = [&](double tokens_per_s, double peak) {
    return peak > 0 ? tokens_per_s * flops_per_token / (peak * 1e9 * world_size) : 0.0;
  };
  std::optional<TrainingSamples> samples;
  if (leader && t.sample_every > 0)
    samples.emplace(s.opts.data.tokenizer, t.sample_prompt, t.sample_tokens, t.seed, run->path());
  std::vector<double> step_seconds;
  double busy = 0, window = 0, train_seconds = 0, last_loss = 0, last_val = NAN;
  // Measured costs of the compute instructions, which the theoretical bubble uses.
  ComputeOpTimes op_times;
  nlohmann::json evals = nlohmann::json::array();

  // Numerical faults: the executor asks before every AdamW update.
  const std::vector<int> nan_steps = injected_nan_steps();
  int current = 0;
  StepVerdict verdict = StepVerdict::Apply;
  s.exec.set_update_gate([&](double loss_sum, double grad_norm) {
    if (std::find(nan_steps.begin(), nan_steps.end(), current + 1) != nan_steps.end()) grad_norm = NAN;
    verdict = s.guard.judge(loss_sum / tokens_per_step, grad_norm);
    float code = static_cast<float>(verdict);  // every rank judged the same values; make sure
    s.topo.world->all_reduce_max(&code, 1);
    verdict = static_cast<StepVerdict>(static_cast<int>(code));
    return verdict == StepVerdict::Apply;
  });
  const int every = s.opts.run.checkpoint_every;
  const int stop_after = stop_after_step();
  int last_saved = -1;
  // No silent hang: each instruction is reported; a rank stuck past [run] timeout_s ends the job.
  ProgressWatchdog watchdog(s.opts.run.timeout_s,
                            "rank " + std::to_string(s.topo.world_rank) + " (" +
                                s.topo.grid.describe(s.topo.world_rank) + ")");
  s.exec.set_watchdog(&watchdog);
  // Save on preemption: SIGTERM / SIGUSR1 finish the step, write a checkpoint and stop.
  const PreemptionSignal preemption;
  // A checkpoint write is not a hang, whatever it takes.
  const auto save_unwatched = [&](int step) {
    watchdog.disarm();
    s.save(step, schedule);
    watchdog.arm();
  };

  // Lanes: restore saved progress (load_lanes sets the lanes up first), then set up and time a
  // few steps of each before training starts, then fill the waits. Loading before calibrating
  // keeps the calibration steps' work and times steps of the restored state.
  if (s.lanes_to_load && s.lanes.scheduler()) s.lanes.scheduler()->load_lanes(*s.lanes_to_load);
  s.lanes_to_load.reset();
  const nlohmann::json calibration = s.lanes.calibrate();
  s.topo.world->barrier();
  if (s.lanes.scheduler()) s.exec.set_gap_filler(s.lanes.scheduler());

  watchdog.arm();
  for (int step = s.start_step; step < t.steps; ++step) {
    current = step;
    s.draw_batch();
    const double lr = schedule.at(step);
    StepStats st = s.exec.step(s.mine(s.all_tokens), s.mine(s.all_targets), loss_scale,
                               static_cast<float>(lr), step + 1);
    // Busy and idle time of this stage within the step's compute window, which ends when the
    // last stage of the pipeline finishes its last backward.
    double my_busy = 0;
    float last_compute = 0;
    for (const InstrRecord& r : st.records)
      if (is_compute(r.instr.op)) {
        my_busy += r.end_s - r.start_s;
        last_compute = std::max(last_compute, static_cast<float>(r.end_s));
        if (step > s.start_step || t.steps == 1) op_times.add(r.instr.op, r.end_s - r.start_s);
      }
    s.topo.world->all_reduce_max(&last_compute, 1);
    if (step > 0 || t.steps == 1) {  // the first step pages memory in: not representative
      busy += my_busy;
      window += last_compute - st.start_s;
    }
    const double secs = st.end_s - st.start_s;
    train_seconds += secs;
    step_seconds.push_back(secs);
    ++steps_run;
    last_step = step + 1;
    // The first step pages memory in: it seeds the average only until a second step exists.
    step_ewma = steps_run <= 2 ? secs : 0.9 * step_ewma + 0.1 * secs;
    last_loss = st.loss_sum / tokens_per_step;
    const double grad_norm = st.grad_norm;
    if (is_traced(step)) {
      traced.push_back(std::move(st));
      traced_numbers.push_back(step + 1);
    }

    const double tps = tokens_per_step / secs;
    if (leader) {
      nlohmann::json row = {{"step", step + 1}, {"loss", last_loss}, {"lr", lr},
                            {"grad_norm", grad_norm},
                            {"tokens_per_s", tps}, {"step_ms", secs * 1e3}, {"mfu", mfu_of(tps, s.peaks.gflops)}};
      if (s.peaks.sgemm_gflops) row["mfu_sgemm"] = mfu_of(tps, *s.peaks.sgemm_gflops);
      if (verdict != StepVerdict::Apply) row["skipped"] = verdict_name(verdict);
      run->append_metrics(row);
      if (verdict != StepVerdict::Apply) {
        char line[96];
        std::snprintf(line, sizeof line, "step %d skipped (%s loss/gradient)", step + 1,
                      verdict == StepVerdict::SkipSpike ? "spiking" : "non-finite");
        progress.note(line);
      }
      progress.update(step, last_loss, lr, tps, step_ewma * (t.steps - step - 1));
    }
    const bool last = step + 1 == t.steps;
    if (t.eval_every > 0 && ((step + 1) % t.eval_every == 0 || last)) {
      last_val = s.evaluate();
      if (leader) {
        evals.push_back({{"step", step + 1}, {"val_loss", last_val}});
        run->append_metrics({{"step", step + 1}, {"val_loss", last_val}});
        char line[96];
        std::snprintf(line, sizeof line, "step %d: validation loss %.4f", step + 1, last_val);
        progress.note(line);
      }
    }
    if (t.sample_every > 0 && ((step + 1) % t.sample_every == 0 || last)) {
      // Rank 0 samples from the whole model; every rank waits, so no step timing includes it.
      std::optional<LoadedModel> model = gather_model_on_rank0(s.exec, s.topo, s.exec_opts.model);
      if (leader) progress.note("step " + std::to_string(step + 1) + " sample: " + samples->sample(step + 1, *model, s.exec.backend()));
      s.topo.world->barrier();
    }
    s.guard.check_stop(step + 1);
    if (every > 0 && ((step + 1) % every == 0 || last)) {
      save_unwatched(step + 1);
      last_saved = step + 1;
    }
    // Preemption: every rank learns whether any was signalled, so all stop after the same step.
    float signal = static_cast<float>(preemption.received());
    s.topo.world->all_reduce_max(&signal, 1);
    if (signal > 0 && !last) {
      if (last_saved != step + 1) save_unwatched(step + 1);
      s.exec.set_watchdog(nullptr);
      s.lanes.teardown();
      throw Preempted(step + 1, static_cast<int>(signal),
                      s.opts.run.dir + "/checkpoints/" + checkpoint_dir_name(step + 1));
    }
    if (stop_after > 0 && step + 1 == stop_after) break;
  }
  // A resumed run with nothing left to do still leaves its final state in its own run directory.
  if (every > 0 && last_saved < 0 && s.start_step == t.steps) save_unwatched(t.steps);
  s.exec.set_update_gate(nullptr);
  if (leader) progress.finish();

  // Per-rank busy/idle and trace events, gathered on rank 0.
  const int world = s.topo.grid.dims().world();
  std::vector<double> per_rank(2 * static_cast<std::size_t>(world), 0.0);
  per_rank[2 * s.topo.world_rank] = busy;
  per_rank[2 * s.topo.world_rank + 1] = window;
  s.topo.world->all_reduce_sum(per_rank.data(), per_rank.size());
  op_times.sum_over(*s.topo.world);
  // t_b is the whole backward: for a split one, its input-gradient half plus the weight half.
  const double t_f = op_times.mean(Op::Fwd), t_w = op_times.mean(Op::BwdWeight);
  const double t_b = op_times.mean(Op::Bwd) + t_w;

  s.lanes.teardown();
  const std::string track = s.topo.grid.describe(s.topo.world_rank);
  nlohmann::json my_events = trace_events(traced, s.topo.world_rank, track);
  for (auto& e : my_events)  // which training step each traced one was
    if (e.value("cat", "") == "step") e["args"]["step"] = traced_numbers.at(e["args"]["index"].get<std::size_t>());
  for (auto& e : s.lanes.trace_events(s.topo.world_rank)) my_events.push_back(std::move(e));
  const auto events_by_rank = gather_to_root(*s.topo.world, my_events.dump());
  const auto lanes_by_rank = gather_to_root(*s.topo.world, s.lanes.summary().dump());
  if (!leader) return {};
  nlohmann::json all_events = nlohmann::json::array();
  for (const std::string& text : events_by_rank)
    for (auto& e : nlohmann::json::parse(text)) all_events.push_back(std::move(e));
  write_chrome_trace(run->path() + "/trace.json", all_events);

  const ParallelDims dims = s.topo.grid.dims();
  nlohmann::json stages = nlohmann::json::array();
  double bubble_sum = 0;
  std::vector<double> stage_busy;
  for (int p = 0; p < dims.pp; ++p) {
    double b = 0, w = 0;
    for (int r = 0; r < world; ++r)
      if (s.topo.grid.coords(r).pp == p) {
        b += per_rank[2 * r];
        w += per_rank[2 * r + 1];
      }
    const double idle = std::max(0.0, w - b);
    const double frac = w > 0 ? idle / w : 0.0;
    bubble_sum += frac;
    const int ranks = dims.tp * dims.dp;
    stages.push_back({{"stage", p}, {"busy_s", b / ranks}, {"idle_s", idle / ranks},
                      {"bubble_fraction", frac}});
    stage_busy.push_back(b / ranks);
  }
  std::vector<double> steady(step_seconds.begin() + std::min<std::size_t>(2, step_seconds.size() / 2),
                             step_seconds.end());
  const double med = median(steady);
  const double tps_med = med > 0 ? tokens_per_step / med : 0.0;
  const double bubble_measured = bubble_sum / dims.pp;
  const double bubble_theoretical = t_f > 0 && t_b > 0 ? theoretical_bubble_fraction(s.exec_opts.schedule, t_f, t_b, t_w)
                                                       : theoretical_bubble_fraction(s.exec_opts.schedule);
  const std::optional<StragglerReport> straggler =
      find_straggler(stage_busy, layers_per_stage(s.opts), bubble_measured, bubble_theoretical);
  nlohmann::json traced_json = nullptr;
  if (!traced_numbers.empty()) traced_json = {traced_numbers.front(), traced_numbers.back()};
  return {
      // What this process actually ran: a stopped or resumed run counts its own steps only.
      {"steps", steps_run},
      {"first_step", steps_run > 0 ? s.start_step + 1 : 0},
      {"last_step", last_step},
      {"steps_configured", t.steps},
      {"tokens", tokens_per_step * steps_run},
      {"train_seconds", train_seconds},
      {"final_loss", last_loss},
      {"final_val_loss", std::isnan(last_val) ? nlohmann::json(nullptr) : nlohmann::json(last_val)},
      {"evals", evals},
      {"step_ms_median", med * 1e3},
      {"tokens_per_s", tps_med},
      {"flops_per_token", flops_per_token},
      // Against the peak of every rank's share of the machine: world ranks x one rank's peak.
      {"peak_gflops", s.peaks.gflops},
      {"peak_source", s.peaks.source},
      {"mfu", mfu_of(tps_med, s.peaks.gflops)},
      {"peak_gflops_sgemm", s.peaks.sgemm_gflops ? nlohmann::json(*s.peaks.sgemm_gflops) : nlohmann::json(nullptr)},
      {"sgemm_source", s.peaks.sgemm_source},
      {"mfu_sgemm", s.peaks.sgemm_gflops ? nlohmann::json(mfu_of(tps_med, *s.peaks.sgemm_gflops)) : nlohmann::json(nullptr)},
      {"parallel", {{"tp", dims.tp}, {"dp", dims.dp}, {"pp", dims.pp},
                    {"schedule", s.opts.parallel.schedule},
                    {"virtual_stages", s.opts.parallel.virtual_stages},
                    {"microbatches", s.exec_opts.schedule.microbatches}}},
      {"stages", stages},
      {"bubble_fraction_measured", bubble_measured},
      {"bubble_fraction_theoretical", bubble_theoretical},
      {"straggler", straggler ? nlohmann::json{{"stage", straggler->stage >= 0 ? nlohmann::json(straggler->stage) : nlohmann::json(nullptr)}, {"busy_s", straggler->busy_s},
                                               {"others_mean_busy_s", straggler->others_mean_s},
                                               {"excess_fraction", straggler->excess},
                                               {"layers_per_stage", straggler->layers},
                                               {"suggested_layers_per_stage", straggler->suggested},
                                               {"message", straggler->message}}
                              : nlohmann::json(nullptr)},
      {"traced_steps", traced_json},
      {"measured_op_ms", {{"forward", t_f * 1e3}, {"backward", t_b * 1e3}, {"backward_weight", t_w * 1e3}}},
      {"training_arena_bytes_rank0", s.exec.arena_bytes()},
      {"resumed_from_step", s.start_step},
      {"skipped_steps", {{"nonfinite", s.guard.state.skipped_nonfinite},
                         {"spike", s.guard.state.skipped_spike}}},
      {"lanes", s.opts.lanes.enabled_lanes().empty()
                    ? nlohmann::json(nullptr)
                    : lanes_summary_json(lanes_by_rank, dims.pp, lane_valuation, train_seconds, med * 1e3, world)},
  };
}

}  // namespace pipelane
