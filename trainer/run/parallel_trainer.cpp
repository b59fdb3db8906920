#include "trainer/run/parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "datasets/sharded_sampler.h"
#include "datasets/window_sampler.h"
#include "model/lr_schedule.h"
#include "parallel/pipeline_executor.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/run/step_guard.h"
#include "trainer/run/preemption.h"
#include "trainer/config/wan_setup.h"
#include "parallel/progress_watchdog.h"
#include "trainer/run/chrome_trace.h"
#include "trainer/run/model_gather.h"
#include "trainer/hf/model_source.h"
#include "trainer/run/progress_line.h"
#include "trainer/run/rank_results.h"
#include "trainer/run/run_measurements.h"
#include "trainer/run/stage_lanes.h"
#include "trainer/run/straggler.h"
#include "trainer/run/training_samples.h"

namespace pipelane {

namespace {

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
  e.recompute = recompute_options_from(o.train);
  e.sequence_parallel = o.parallel.sequence_parallel;
  e.storage = o.train.storage == "bf16" ? DType::BF16 : DType::F32;
  e.gemm_weights = o.train.gemm_weights == "bf16" ? DType::BF16 : DType::F32;
  e.distributed_optimizer = o.train.distributed_optimizer;
  return e;
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
    CheckpointTopology topology;
    topology.tp = d.tp;
    topology.pp = d.pp;
    topology.dp = d.dp;
    topology.schedule = opts.parallel.schedule;
    topology.virtual_stages = opts.parallel.virtual_stages;
    topology.layers_per_stage = opts.parallel.layers_per_stage;
    std::optional<LaneStates> lane_states;
    if (GapScheduler* g = lanes.scheduler()) lane_states = LaneStates{g->lane_names(), g->save_lanes()};
    save_checkpoint(checkpoints_root(opts.run.dir), step, exec, topo, progress(step, schedule),
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
  load_training_memory(reader, s.exec);
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
  // Through a load's view: with sharded masters each rank keeps its shard of what is written there.
  const CheckpointView state = s.exec.checkpoint_view(/*gather=*/false);
  std::vector<float> staging;  // the weights are written on the host, then copied in
  for (const ChunkState& c : state.chunks) {
    staging.assign(c.layout->total_floats(), 0.f);
    copy_model_into(m, *c.layout, staging.data());
    s.exec.backend().copy(c.params, staging.data(), staging.size() * sizeof(float), s.exec.compute_stream());
  }
  s.exec.compute_stream().synchronize();
  s.exec.keep_loaded_state(state);
}

void ParallelTrainer::set_mfu_peaks(const MfuPeaks& peaks) { s_->peaks = peaks; }

// One call of run(): the steps from the one resumed at, what each measures, rank 0's metrics rows
// and console lines, validations, samples, checkpoints, and the stops (preemption, the test hook);
// then the gathers on rank 0 and the summary.
struct ParallelTrainer::Loop {
  State& s;
  RunDirectory* run;  // rank 0's
  const TrainLoopOptions& t;
  const bool leader;
  const LrSchedule schedule;
  const double tokens_per_step;
  const float loss_scale;
  const double flops_per_token;
  ProgressLine progress;
  const RunOptions::StepRange trace_range;
  std::optional<TrainingSamples> samples;  // rank 0's, with [train] sample_every
  RankMeasurements measured;
  double step_ewma = 0;  // smoothed step time for the ETA
  // The update gate's: PIPELANE_FAULT_NAN_STEPS, the step running and the verdict on it.
  const std::vector<int> nan_steps = injected_nan_steps();
  int current = 0;
  StepVerdict verdict = StepVerdict::Apply;
  int last_saved = -1;
  // No silent hang: each instruction is reported; a rank stuck past [run] timeout_s ends the job.
  ProgressWatchdog watchdog;
  // Save on preemption: SIGTERM / SIGUSR1 finish the step, write a checkpoint and stop.
  const PreemptionSignal preemption;

  Loop(State& state, RunDirectory* run_dir, std::FILE* console)
      : s(state), run(run_dir), t(state.opts.train), leader(state.topo.world_rank == 0),
        schedule{t.lr, t.min_lr, t.warmup_steps, t.steps},
        tokens_per_step(static_cast<double>(t.global_batch) * state.T),
        loss_scale(static_cast<float>(1.0 / tokens_per_step)),
        flops_per_token(gpt_config_from(state.opts.model).train_flops_per_token(state.T)),
        progress(console ? console : stdout, t.steps, state.opts.run.log_every, state.topo.grid.dims().world() == 1),
        trace_range(state.opts.run.traced_steps()),
        watchdog(state.opts.run.timeout_s, "rank " + std::to_string(state.topo.world_rank) + " (" +
                                               state.topo.grid.describe(state.topo.world_rank) + ")") {
    measured.last_step = s.start_step;
    if (leader && t.sample_every > 0)
      samples.emplace(s.opts.data.tokenizer, t.sample_prompt, t.sample_tokens, t.seed, run->path());
    install_update_gate();
    s.exec.set_watchdog(&watchdog);
  }

  // Numerical faults: the executor asks before every AdamW update.
  void install_update_gate() {
    s.exec.set_update_gate([this](double loss_sum, double grad_norm) {
      if (std::find(nan_steps.begin(), nan_steps.end(), current + 1) != nan_steps.end()) grad_norm = NAN;
      verdict = s.guard.judge(loss_sum / tokens_per_step, grad_norm);
      float code = static_cast<float>(verdict);  // every rank judged the same values; make sure
      s.topo.world->all_reduce_max(&code, 1);
      verdict = static_cast<StepVerdict>(static_cast<int>(code));
      return verdict == StepVerdict::Apply;
    });
  }

  // Lanes: restore saved progress (load_lanes sets the lanes up first), then set up and time a
  // few steps of each before training starts, then fill the waits. Loading before calibrating
  // keeps the calibration steps' work and times steps of the restored state.
  void start_lanes() {
    if (s.lanes_to_load && s.lanes.scheduler()) s.lanes.scheduler()->load_lanes(*s.lanes_to_load);
    s.lanes_to_load.reset();
    s.lanes.calibrate();
    s.topo.world->barrier();
    if (s.lanes.scheduler()) s.exec.set_gap_filler(s.lanes.scheduler());
  }

  void run_steps() {
    const int stop_after = stop_after_step();
    watchdog.arm();
    for (int step = s.start_step; step < t.steps; ++step) {
      train_step(step);
      if (due(step, t.eval_every)) validate(step);
      if (due(step, t.sample_every)) sample(step);
      s.guard.check_stop(step + 1);
      if (checkpoint_due(step)) save(step + 1);
      stop_if_preempted(step);
      if (stop_after > 0 && step + 1 == stop_after) break;
    }
    // A resumed run with nothing left to do still leaves its final state in its own run directory.
    if (s.opts.run.checkpoint_every != 0 && last_saved < 0 && s.start_step == t.steps) save(t.steps);
    s.exec.set_update_gate(nullptr);
    if (leader) progress.finish();
  }

  // Every `every` steps (0: never), and at the last one.
  bool due(int step, int every) const { return every > 0 && ((step + 1) % every == 0 || step + 1 == t.steps); }
  // [run] checkpoint_every: -1 (the default) saves after the last step only.
  bool checkpoint_due(int step) const {
    const int every = s.opts.run.checkpoint_every;
    return every < 0 ? step + 1 == t.steps : due(step, every);
  }
  bool traced(int step) const {
    return trace_range.first > 0 ? step + 1 >= trace_range.first && step + 1 <= trace_range.last
                                 : step - s.start_step < trace_range.count;
  }
  double mfu(double tokens_per_s, double peak) const {
    return peak > 0 ? tokens_per_s * flops_per_token / (peak * 1e9 * s.topo.grid.dims().world()) : 0.0;
  }

  // Step `step` (0-based) and what it measured.
  void train_step(int step) {
    current = step;
    s.draw_batch();
    const double lr = schedule.at(step);
    StepStats st = s.exec.step(s.mine(s.all_tokens), s.mine(s.all_targets), loss_scale, static_cast<float>(lr), step + 1);
    add_compute_times(measured, st, step, s.start_step, t.steps, *s.topo.world);
    const double secs = st.end_s - st.start_s;
    measured.train_seconds += secs;
    measured.step_seconds.push_back(secs);
    ++measured.steps_run;
    measured.last_step = step + 1;
    // The first step pages memory in: it seeds the average only until a second step exists.
    step_ewma = measured.steps_run <= 2 ? secs : 0.9 * step_ewma + 0.1 * secs;
    measured.last_loss = st.loss_sum / tokens_per_step;
    const double grad_norm = st.grad_norm;
    if (traced(step)) {
      measured.traced.push_back(std::move(st));
      measured.traced_numbers.push_back(step + 1);
    }
    if (leader) report_step(step, lr, grad_norm, secs);
  }

  // Rank 0: the step's metrics row and console line.
  void report_step(int step, double lr, double grad_norm, double secs) {
    const double tps = tokens_per_step / secs;
    nlohmann::json row = {{"step", step + 1}, {"loss", measured.last_loss}, {"lr", lr}, {"grad_norm", grad_norm},
                          {"tokens_per_s", tps}, {"step_ms", secs * 1e3}, {"mfu", mfu(tps, s.peaks.gflops)}};
    if (s.peaks.sgemm_gflops) row["mfu_sgemm"] = mfu(tps, *s.peaks.sgemm_gflops);
    if (verdict != StepVerdict::Apply) row["skipped"] = verdict_name(verdict);
    run->append_metrics(row);
    if (verdict != StepVerdict::Apply) {
      char line[96];
      std::snprintf(line, sizeof line, "step %d skipped (%s loss/gradient)", step + 1,
                    verdict == StepVerdict::SkipSpike ? "spiking" : "non-finite");
      progress.note(line);
    }
    progress.update(step, measured.last_loss, lr, tps, step_ewma * (t.steps - step - 1));
  }

  void validate(int step) {
    measured.last_val_loss = s.evaluate();
    if (!leader) return;
    measured.evals.push_back({step + 1, measured.last_val_loss});
    run->append_metrics({{"step", step + 1}, {"val_loss", measured.last_val_loss}});
    char line[96];
    std::snprintf(line, sizeof line, "step %d: validation loss %.4f", step + 1, measured.last_val_loss);
    progress.note(line);
  }

  // Rank 0 samples from the whole model; every rank waits, so no step timing includes it.
  void sample(int step) {
    std::optional<LoadedModel> model = gather_model_on_rank0(s.exec, s.topo, s.exec_opts.model);
    if (leader)
      progress.note("step " + std::to_string(step + 1) + " sample: " + samples->sample(step + 1, *model, s.exec.backend()));
    s.topo.world->barrier();
  }

  // A checkpoint write is not a hang, whatever it takes.
  void save(int step) {
    watchdog.disarm();
    s.save(step, schedule);
    watchdog.arm();
    last_saved = step;
  }

  // Preemption: every rank learns whether any was signalled, so all stop after the same step
  // (not after the last one: that run is complete).
  void stop_if_preempted(int step) {
    float signal = static_cast<float>(preemption.received());
    s.topo.world->all_reduce_max(&signal, 1);
    if (!(signal > 0) || step + 1 == t.steps) return;
    if (last_saved != step + 1) save(step + 1);
    s.exec.set_watchdog(nullptr);
    s.lanes.teardown();
    throw Preempted(step + 1, static_cast<int>(signal),
                    (std::filesystem::path(checkpoints_root(s.opts.run.dir)) / checkpoint_dir_name(step + 1)).string());
  }

  // Collective: every rank's measurements, trace events and lane summary go to rank 0, which
  // writes trace.json and returns the summary (the other ranks an empty one).
  RunSummary finish(const LaneValuation& valuation) {
    const BusyByRank busy = gather_busy_times(*s.topo.world, measured);
    measured.op_times.sum_over(*s.topo.world);
    s.lanes.teardown();
    const int rank = s.topo.world_rank;
    std::vector<TraceEvent> events = trace_events(measured.traced, measured.traced_numbers, rank, s.topo.grid.describe(rank));
    for (TraceEvent& e : s.lanes.trace_events(rank)) events.push_back(std::move(e));
    const std::vector<TraceEvent> all_events = gather_trace_events(*s.topo.world, events);
    const std::vector<std::optional<StageLaneSummary>> lanes = gather_lane_summaries(*s.topo.world, s.lanes.summary());
    const std::vector<ArenaMemory> memory = gather_arena_memory();
    if (!leader) return {};
    write_chrome_trace(run->path() + "/trace.json", all_events);
    RunSummary summary = summarise(busy);
    summary.training->memory = memory;
    const ParallelDims dims = s.topo.grid.dims();
    if (!s.opts.lanes.enabled_lanes().empty()) {
      std::vector<double> step_ms;
      for (const double seconds : measured.step_seconds) step_ms.push_back(seconds * 1e3);
      summary.lanes = training_lanes(lanes, dims.pp, valuation, measured.train_seconds, summary.step_ms_median,
                                     dims.world(), steady_step_quartiles(step_ms));
    }
    return summary;
  }

  // Collective: every rank's predicted and measured arena bytes, on rank 0 (empty elsewhere). Each
  // rank fills its row of a world x 2 table and the sum assembles it (bytes are exact in doubles).
  std::vector<ArenaMemory> gather_arena_memory() const {
    const int world = s.topo.world->size(), rank = s.topo.world_rank;
    std::vector<double> table(2 * static_cast<std::size_t>(world), 0.0);
    table[2 * rank] = s.exec.predicted_memory().total();
    table[2 * rank + 1] = static_cast<double>(s.exec.arena_high_water());
    s.topo.world->all_reduce_sum(table.data(), table.size());
    std::vector<ArenaMemory> out;
    if (!leader) return out;
    for (int r = 0; r < world; ++r) {
      const RankCoords c = s.topo.grid.coords(r);
      out.push_back({r, c.pp, c.tp, c.dp, table[2 * r], table[2 * r + 1]});
    }
    return out;
  }

  // Rank 0: summary.json's numbers from every rank's measurements (the lanes aside).
  RunSummary summarise(const BusyByRank& busy) const {
    const RankMeasurements& m = measured;
    RunSummary summary;
    // What this process actually ran: a stopped or resumed run counts its own steps only.
    summary.steps = m.steps_run;
    summary.tokens = tokens_per_step * m.steps_run;
    summary.train_seconds = m.train_seconds;
    summary.final_loss = m.last_loss;
    if (!std::isnan(m.last_val_loss)) summary.final_val_loss = m.last_val_loss;
    summary.evals = m.evals;
    const double step_s = steady_step_seconds(m.step_seconds);
    summary.step_ms_median = step_s * 1e3;
    summary.tokens_per_s = step_s > 0 ? tokens_per_step / step_s : 0.0;
    summary.flops_per_token = flops_per_token;
    // Against the peak of every rank's share of the machine: world ranks x one rank's peak.
    summary.peak_gflops = s.peaks.gflops;
    summary.mfu = mfu(summary.tokens_per_s, s.peaks.gflops);
    const ParallelDims dims = s.topo.grid.dims();
    summary.parallel = {dims.tp, dims.dp, dims.pp, s.opts.parallel.schedule, s.opts.parallel.virtual_stages,
                        s.exec_opts.schedule.microbatches};
    summary.stages = stage_times(s.topo.grid, busy);
    summary.bubble_fraction_measured = measured_bubble(summary.stages);
    // With the measured costs of the compute instructions, where there are some.
    const double t_f = m.op_times.mean(Op::Fwd), t_w = m.op_times.mean(Op::BwdWeight);
    const double t_b = m.op_times.mean(Op::Bwd) + t_w;
    summary.bubble_fraction_theoretical = t_f > 0 && t_b > 0 ? theoretical_bubble_fraction(s.exec_opts.schedule, t_f, t_b, t_w)
                                                             : theoretical_bubble_fraction(s.exec_opts.schedule);
    summary.measured_op_ms = m.op_times.means_ms();
    summary.training_arena_bytes_rank0 = static_cast<double>(s.exec.arena_bytes());
    summary.resumed_from_step = s.start_step;
    summary.training = training_part(summary);
    return summary;
  }

  TrainingPart training_part(const RunSummary& summary) const {
    TrainingPart p;
    p.first_step = measured.steps_run > 0 ? s.start_step + 1 : 0;
    p.last_step = measured.last_step;
    p.steps_configured = t.steps;
    p.peak_source = s.peaks.source;
    p.peak_gflops_sgemm = s.peaks.sgemm_gflops;
    p.sgemm_source = s.peaks.sgemm_source;
    if (s.peaks.sgemm_gflops) p.mfu_sgemm = mfu(summary.tokens_per_s, *s.peaks.sgemm_gflops);
    std::vector<double> stage_busy;
    for (const StageTime& st : summary.stages) stage_busy.push_back(st.busy_s);
    p.straggler = find_straggler(stage_busy, layers_per_stage(s.opts), summary.bubble_fraction_measured,
                                 summary.bubble_fraction_theoretical);
    if (!measured.traced_numbers.empty())
      p.traced_steps = std::pair<int, int>{measured.traced_numbers.front(), measured.traced_numbers.back()};
    p.skipped_nonfinite = s.guard.state.skipped_nonfinite;
    p.skipped_spike = s.guard.state.skipped_spike;
    return p;
  }
};

RunSummary ParallelTrainer::run(RunDirectory* run, std::FILE* console, const LaneValuation& lane_valuation) {
  Loop loop(*s_, run, console);
  loop.start_lanes();
  loop.run_steps();
  return loop.finish(lane_valuation);
}

}  // namespace pipelane
