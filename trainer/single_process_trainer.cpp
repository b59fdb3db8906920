#include "trainer/single_process_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "datasets/sharded_sampler.h"
#include "datasets/window_sampler.h"
#include "model/adamw.h"
#include "model/lr_schedule.h"
#include "trainer/progress_line.h"

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

struct SingleProcessTrainer::State {
  const TrainOptions& opts;
  const TokenStore& data;
  double peak_gflops;
  GptStage model;
  int B, T, accum;
  std::unique_ptr<Arena> arena;
  // The flat buffers, one per category, carved from the training arena.
  float *params, *grads, *m, *v;
  std::int32_t *inputs, *targets;
  MicrobatchActivations acts;
  StageScratch scratch;
  ShardedSampler sampler;  // state()/restore() for checkpoints; single process is dp rank 0 of 1

  State(const TrainOptions& o, const TokenStore& d, double peak)
      : opts(o),
        data(d),
        peak_gflops(peak),
        model(gpt_config_from(o.model), StageRange::whole(gpt_config_from(o.model))),
        B(o.train.micro_batch),
        T(o.model.seq_len),
        accum(o.train.global_batch / o.train.micro_batch),
        sampler(d.train(), SamplerOptions{o.model.seq_len, o.train.seed,
                                          parse_sample_mode(o.data.sample_mode), 0, 1}) {
    const std::size_t P = model.layout().total_floats() * sizeof(float);
    const std::size_t tok = static_cast<std::size_t>(B) * T * sizeof(std::int32_t);
    const std::size_t bytes = arena_bytes_for({P, P, P, P, tok, tok}) +
                              model.activation_bytes(B, T) + model.scratch_bytes(B, T);
    arena = std::make_unique<Arena>("training", bytes);
    params = arena->allocate_n<float>(model.layout().total_floats(), "parameters");
    grads = arena->allocate_n<float>(model.layout().total_floats(), "gradients");
    m = arena->allocate_n<float>(model.layout().total_floats(), "adamw.m");
    v = arena->allocate_n<float>(model.layout().total_floats(), "adamw.v");
    inputs = arena->allocate_n<std::int32_t>(static_cast<std::size_t>(B) * T, "inputs");
    targets = arena->allocate_n<std::int32_t>(static_cast<std::size_t>(B) * T, "targets");
    acts = model.allocate_activations(*arena, B, T);
    scratch = model.allocate_scratch(*arena, B, T);
    GptStage::init_parameters(model.layout(), params, o.train.seed);
  }
};

SingleProcessTrainer::SingleProcessTrainer(const TrainOptions& opts, const TokenStore& data,
                                           Device&, double peak_gflops)
    : s_(std::make_unique<State>(opts, data, peak_gflops)) {}

SingleProcessTrainer::~SingleProcessTrainer() = default;

std::size_t SingleProcessTrainer::arena_bytes() const { return s_->arena->capacity(); }

double SingleProcessTrainer::evaluate() {
  State& s = *s_;
  const int batches = s.opts.train.eval_batches;
  double total = 0.0;
  for (int i = 0; i < batches; ++i) {
    fill_eval_batch(s.data.valid(), s.T, s.B, i, s.inputs, s.targets);
    total += s.model.forward(s.params, nullptr, s.acts, s.scratch, s.inputs, nullptr, s.targets, 1.f);
  }
  return total / (static_cast<double>(batches) * s.B * s.T);
}

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

nlohmann::json SingleProcessTrainer::run(RunDirectory& run, std::FILE* console) {
  State& s = *s_;
  const TrainLoopOptions& t = s.opts.train;
  const LrSchedule schedule{t.lr, t.min_lr, t.warmup_steps, t.steps};
  const AdamWConfig adamw{static_cast<float>(t.beta1), static_cast<float>(t.beta2),
                          static_cast<float>(t.eps), static_cast<float>(t.weight_decay)};
  const std::size_t P = s.model.layout().total_floats();
  const double tokens_per_step = static_cast<double>(t.global_batch) * s.T;
  const double flops_per_token = s.model.config().train_flops_per_token(s.T);
  const float loss_scale = 1.0f / (static_cast<float>(s.B) * s.T * s.accum);

  ProgressLine progress(console, t.steps, s.opts.run.log_every);
  std::vector<double> step_seconds;
  double last_loss = 0.0, last_val = NAN, train_seconds = 0.0;
  nlohmann::json evals = nlohmann::json::array();
  const auto started = std::chrono::steady_clock::now();

  for (int step = 0; step < t.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memset(s.grads, 0, P * sizeof(float));
    double loss_sum = 0.0;
    for (int micro = 0; micro < s.accum; ++micro) {
      s.sampler.next_batch(s.B, s.inputs, s.targets);
      loss_sum += s.model.forward(s.params, s.grads, s.acts, s.scratch, s.inputs, nullptr,
                                  s.targets, loss_scale);
      s.model.backward(s.params, s.grads, s.acts, s.scratch, s.inputs, nullptr, nullptr);
    }
    const double loss = loss_sum / tokens_per_step;
    const double grad_norm = std::sqrt(grad_sum_squares(s.model.layout(), s.grads));
    const double lr = schedule.at(step);
    adamw_step(s.model.layout(), s.params, s.grads, s.m, s.v, adamw, static_cast<float>(lr),
               step + 1, clip_scale(grad_norm, static_cast<float>(t.grad_clip)));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_seconds += secs;
    step_seconds.push_back(secs);
    last_loss = loss;

    const double tps = tokens_per_step / secs;
    const double mfu = s.peak_gflops > 0 ? tps * flops_per_token / (s.peak_gflops * 1e9) : 0.0;
    run.append_metrics({{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                        {"tokens_per_s", tps}, {"step_ms", secs * 1e3}, {"mfu", mfu}});
    const double avg = train_seconds / (step + 1);
    progress.update(step, loss, lr, tps, avg * (t.steps - step - 1));

    const bool last = step + 1 == t.steps;
    if (t.eval_every > 0 && ((step + 1) % t.eval_every == 0 || last)) {
      last_val = evaluate();
      evals.push_back({{"step", step + 1}, {"val_loss", last_val}});
      run.append_metrics({{"step", step + 1}, {"val_loss", last_val}});
      char line[96];
      std::snprintf(line, sizeof line, "step %d: validation loss %.4f", step + 1, last_val);
      progress.note(line);
    }
  }
  progress.finish();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // The first steps warm caches and page in the arena; the median of the rest is the steady rate.
  std::vector<double> steady(step_seconds.begin() + std::min<std::size_t>(2, step_seconds.size() / 2),
                             step_seconds.end());
  const double med = median(steady);
  const double tps_med = med > 0 ? tokens_per_step / med : 0.0;
  return {
      {"steps", t.steps},
      {"tokens", tokens_per_step * t.steps},
      {"train_seconds", train_seconds},
      {"wall_seconds", wall},
      {"final_loss", last_loss},
      {"final_val_loss", std::isnan(last_val) ? nlohmann::json(nullptr) : nlohmann::json(last_val)},
      {"evals", evals},
      {"step_ms_median", med * 1e3},
      {"tokens_per_s", tps_med},
      {"flops_per_token", flops_per_token},
      {"peak_gflops", s.peak_gflops},
      {"mfu", s.peak_gflops > 0 ? tps_med * flops_per_token / (s.peak_gflops * 1e9) : 0.0},
      {"parameters", s.model.layout().total_floats()},
      {"training_arena_bytes", s.arena->capacity()},
  };
}

}  // namespace pipelane
