#include "trainer/parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "datasets/window_sampler.h"
#include "model/lr_schedule.h"
#include "parallel/pipeline_executor.h"
#include "trainer/chrome_trace.h"
#include "trainer/progress_line.h"
#include "trainer/single_process_trainer.h"

namespace pipelane {

namespace {

ExecutorOptions executor_options(const TrainOptions& o, int dp) {
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
  return e;
}

bool is_compute(Op op) { return op == Op::Fwd || op == Op::Bwd || op == Op::BwdWeight; }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

constexpr int kTracedSteps = 20;  // trace.json keeps the first steps; a long run's would be huge

}  // namespace

struct ParallelTrainer::State {
  const TrainOptions& opts;
  const TokenStore& data;
  Topology& topo;
  double peak_gflops;
  int dp, B, T, micro_total, micro_mine;
  ExecutorOptions exec_opts;
  PipelineExecutor exec;
  WindowSampler sampler;
  std::vector<std::int32_t> all_tokens, all_targets, eval_tokens, eval_targets;

  State(const TrainOptions& o, const TokenStore& d, Topology& t, double peak)
      : opts(o), data(d), topo(t), peak_gflops(peak), dp(t.grid.dims().dp),
        B(o.train.micro_batch), T(o.model.seq_len),
        micro_total(o.train.global_batch / o.train.micro_batch), micro_mine(micro_total / dp),
        exec_opts(executor_options(o, dp)), exec(exec_opts, t),
        sampler(d.train(), o.model.seq_len, o.train.seed) {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    all_tokens.resize(rows * micro_total);
    all_targets.resize(rows * micro_total);
    eval_tokens.resize(rows * o.train.eval_batches);
    eval_targets.resize(rows * o.train.eval_batches);
  }

  // Every rank draws the whole global batch in the single-process order and keeps its replica's
  // share, so any dp gives the same samples per step as one process.
  void draw_batch() {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    for (int k = 0; k < micro_total; ++k)
      sampler.next_batch(B, all_tokens.data() + k * rows, all_targets.data() + k * rows);
  }
  const std::int32_t* mine(const std::vector<std::int32_t>& v) const {
    return v.data() + static_cast<std::size_t>(topo.me.dp) * micro_mine * B * T;
  }

  double evaluate() {
    const std::size_t rows = static_cast<std::size_t>(B) * T;
    const int n = opts.train.eval_batches;
    for (int i = 0; i < n; ++i)
      fill_eval_batch(data.valid(), T, B, i, eval_tokens.data() + i * rows, eval_targets.data() + i * rows);
    return exec.evaluate_sum(eval_tokens.data(), eval_targets.data(), n) / (static_cast<double>(n) * rows);
  }
};

ParallelTrainer::ParallelTrainer(const TrainOptions& opts, const TokenStore& data, Topology& topo,
                                 double peak_gflops)
    : s_(std::make_unique<State>(opts, data, topo, peak_gflops)) {}
ParallelTrainer::~ParallelTrainer() = default;
std::size_t ParallelTrainer::arena_bytes() const { return s_->exec.arena_bytes(); }

nlohmann::json ParallelTrainer::run(RunDirectory* run, std::FILE* console) {
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
  std::vector<double> step_seconds;
  double busy = 0, window = 0, train_seconds = 0, last_loss = 0, last_val = NAN;
  nlohmann::json evals = nlohmann::json::array();

  for (int step = 0; step < t.steps; ++step) {
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
      }
    s.topo.world->all_reduce_max(&last_compute, 1);
    if (step > 0 || t.steps == 1) {  // the first step pages memory in: not representative
      busy += my_busy;
      window += last_compute - st.start_s;
    }
    const double secs = st.end_s - st.start_s;
    train_seconds += secs;
    step_seconds.push_back(secs);
    last_loss = st.loss_sum / tokens_per_step;
    const double grad_norm = st.grad_norm;
    if (static_cast<int>(traced.size()) < kTracedSteps) traced.push_back(std::move(st));

    const double tps = tokens_per_step / secs;
    if (leader) {
      const double mfu = s.peak_gflops > 0 ? tps * flops_per_token / (s.peak_gflops * 1e9 * s.topo.grid.dims().world()) : 0.0;
      run->append_metrics({{"step", step + 1}, {"loss", last_loss}, {"lr", lr},
                           {"grad_norm", grad_norm},
                           {"tokens_per_s", tps}, {"step_ms", secs * 1e3}, {"mfu", mfu}});
      progress.update(step, last_loss, lr, tps, train_seconds / (step + 1) * (t.steps - step - 1));
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
  }
  if (leader) progress.finish();

  // Per-rank busy/idle and trace events, gathered on rank 0.
  const int world = s.topo.grid.dims().world();
  std::vector<double> per_rank(2 * static_cast<std::size_t>(world), 0.0);
  per_rank[2 * s.topo.world_rank] = busy;
  per_rank[2 * s.topo.world_rank + 1] = window;
  s.topo.world->all_reduce_sum(per_rank.data(), per_rank.size());

  const std::string track = s.topo.grid.describe(s.topo.world_rank);
  const std::string mine = trace_events(traced, s.topo.world_rank, track).dump();
  nlohmann::json all_events = nlohmann::json::array();
  if (leader) {
    for (auto& e : nlohmann::json::parse(mine)) all_events.push_back(std::move(e));
    for (int r = 1; r < world; ++r) {
      std::uint64_t len = 0;
      s.topo.world->irecv(&len, sizeof len, r, 1)->wait();
      std::string buf(len, ' ');
      s.topo.world->irecv(buf.data(), len, r, 2)->wait();
      for (auto& e : nlohmann::json::parse(buf)) all_events.push_back(std::move(e));
    }
    write_chrome_trace(run->path() + "/trace.json", all_events);
  } else if (world > 1) {
    const std::uint64_t len = mine.size();
    s.topo.world->isend(&len, sizeof len, 0, 1)->wait();
    s.topo.world->isend(mine.data(), len, 0, 2)->wait();
  }
  if (!leader) return {};

  const ParallelDims dims = s.topo.grid.dims();
  nlohmann::json stages = nlohmann::json::array();
  double bubble_sum = 0;
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
  }
  std::vector<double> steady(step_seconds.begin() + std::min<std::size_t>(2, step_seconds.size() / 2),
                             step_seconds.end());
  const double med = median(steady);
  const double tps_med = med > 0 ? tokens_per_step / med : 0.0;
  return {
      {"steps", t.steps},
      {"tokens", tokens_per_step * t.steps},
      {"train_seconds", train_seconds},
      {"final_loss", last_loss},
      {"final_val_loss", std::isnan(last_val) ? nlohmann::json(nullptr) : nlohmann::json(last_val)},
      {"evals", evals},
      {"step_ms_median", med * 1e3},
      {"tokens_per_s", tps_med},
      {"flops_per_token", flops_per_token},
      {"peak_gflops", s.peak_gflops},
      // Against the peak of every rank's share of the machine: world ranks x one rank's peak.
      {"mfu", s.peak_gflops > 0 ? tps_med * flops_per_token / (s.peak_gflops * 1e9 * world) : 0.0},
      {"parallel", {{"tp", dims.tp}, {"dp", dims.dp}, {"pp", dims.pp},
                    {"schedule", s.opts.parallel.schedule},
                    {"virtual_stages", s.opts.parallel.virtual_stages},
                    {"microbatches", s.exec_opts.schedule.microbatches}}},
      {"stages", stages},
      {"bubble_fraction_measured", bubble_sum / dims.pp},
      {"bubble_fraction_theoretical", theoretical_bubble_fraction(s.exec_opts.schedule)},
      {"training_arena_bytes_rank0", s.exec.arena_bytes()},
  };
}

}  // namespace pipelane
