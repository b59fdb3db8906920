#include "lanes/builtin/smalltrain_lane.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "datasets/data_error.h"
#include "lanes/builtin/state_bytes.h"

namespace pipelane {
namespace {

constexpr char kStateMagic[8] = {'P', 'L', 'S', 'M', 'T', 'R', 'N', '1'};

SmallTrainSettings read_settings(const LaneContext& ctx) {
  const LaneOptions& o = ctx.options;
  SmallTrainSettings s;
  s.data = o.get_string("data", s.data);
  s.model.layers = static_cast<int>(o.get_int("layers", 2, 1, 256));
  s.model.d_model = static_cast<int>(o.get_int("d_model", 64, 1, 1 << 16));
  s.model.heads = static_cast<int>(o.get_int("heads", 2, 1, 1 << 12));
  s.seq_len = static_cast<int>(o.get_int("seq_len", 64, 1, 1 << 16));
  s.model.max_seq_len = s.seq_len;
  s.model.vocab_size = static_cast<int>(o.get_int("vocab_size", 256, 1, 1 << 24));
  s.micro_batch = static_cast<int>(o.get_int("micro_batch", 2, 1, 1 << 16));
  s.accumulation = static_cast<int>(o.get_int("accumulation", 2, 1, 1 << 16));
  s.lr = o.get_double("lr", 1e-3, 0.0, 10.0);
  s.grad_clip = o.get_double("grad_clip", 1.0, 0.0, 1e9);
  s.steps = o.get_int("steps", 200, 1, std::numeric_limits<std::int32_t>::max());
  s.eval_batches = static_cast<int>(o.get_int("eval_batches", 4, 0, 1 << 20));
  s.seed = static_cast<std::uint64_t>(
      o.get_int("seed", static_cast<std::int64_t>(ctx.seed + static_cast<std::uint64_t>(ctx.rank)),
                0, std::numeric_limits<std::int64_t>::max()));
  o.reject_unknown();
  const std::string problem = s.model.problem();
  if (!problem.empty()) throw LaneError("lane smalltrain: " + problem);
  return s;
}

}  // namespace

std::size_t SmallTrainLane::arena_bytes_needed() const {
  if (!stage_) throw std::logic_error("SmallTrainLane::arena_bytes_needed: call setup() first");
  const SmallTrainSettings& s = s_;
  const GptStage& stage = *stage_;
  const std::size_t pbytes =
      align_up(stage.layout().total_floats() * sizeof(float), Arena::kDefaultAlignment);
  const std::size_t tok =
      align_up(static_cast<std::size_t>(s.micro_batch) * s.seq_len * sizeof(std::int32_t),
               Arena::kDefaultAlignment);
  return 4 * pbytes + stage.activation_bytes(s.micro_batch, s.seq_len) +
         stage.scratch_bytes(s.micro_batch, s.seq_len) + 2 * tok;
}

void SmallTrainLane::setup(LaneContext& ctx) {
  s_ = read_settings(ctx);
  output_dir_ = ctx.output_dir;
  try {
    store_ = std::make_unique<TokenStore>(TokenStore::open(s_.data));
  } catch (const DataError& e) {
    throw LaneError(std::string("lane smalltrain: data: ") + e.what());
  }
  if (store_->meta().vocab_size > static_cast<std::uint32_t>(s_.model.vocab_size))
    throw LaneError("lane smalltrain: " + s_.data + " has vocab_size " +
                    std::to_string(store_->meta().vocab_size) + ", more than the model's vocab_size " +
                    std::to_string(s_.model.vocab_size));
  try {
    sampler_ = std::make_unique<WindowSampler>(store_->train(), s_.seq_len, s_.seed);
  } catch (const DataError& e) {
    throw LaneError("lane smalltrain: " + s_.data + " train split: " + e.what());
  }
  eval_total_ = 0;
  if (s_.eval_batches > 0 && eval_window_count(store_->valid(), s_.seq_len) > 0) {
    // Every distinct validation window at most once (rounded up to whole batches).
    const std::int64_t windows = eval_window_count(store_->valid(), s_.seq_len);
    eval_total_ = std::min<std::int64_t>(s_.eval_batches,
                                         (windows + s_.micro_batch - 1) / s_.micro_batch);
  }

  stage_ = std::make_unique<GptStage>(s_.model, StageRange::whole(s_.model), ctx.backend, ctx.stream);
  const std::size_t need = arena_bytes_needed();
  const std::size_t free_bytes = ctx.arena.capacity() - ctx.arena.used();
  if (need > free_bytes)
    throw LaneError("lane smalltrain: the model needs " + std::to_string(need) +
                    " bytes of arena (parameters, gradients, AdamW moments, activations), arena '" +
                    ctx.arena.name() + "' has " + std::to_string(free_bytes) + " free of " +
                    std::to_string(ctx.arena.capacity()));
  const std::size_t P = stage_->layout().total_floats();
  params_ = ctx.arena.allocate_n<float>(P, "smalltrain.params");
  grads_ = ctx.arena.allocate_n<float>(P, "smalltrain.grads");
  m_ = ctx.arena.allocate_n<float>(P, "smalltrain.adam_m");
  v_ = ctx.arena.allocate_n<float>(P, "smalltrain.adam_v");
  acts_ = stage_->allocate_activations(ctx.arena, s_.micro_batch, s_.seq_len);
  scratch_ = stage_->allocate_scratch(ctx.arena, s_.micro_batch, s_.seq_len);
  const std::size_t BT = static_cast<std::size_t>(s_.micro_batch) * s_.seq_len;
  inputs_ = ctx.arena.allocate_n<std::int32_t>(BT, "smalltrain.inputs");
  targets_ = ctx.arena.allocate_n<std::int32_t>(BT, "smalltrain.targets");
  inputs_host_.assign(BT, 0);
  targets_host_.assign(BT, 0);
  std::vector<float> staging(P);  // initial values are written on the host, then copied in
  GptStage::init_parameters(stage_->layout(), staging.data(), s_.seed);
  ctx.backend.copy(params_, staging.data(), P * sizeof(float), ctx.stream);
  ctx.stream.synchronize();
}

bool SmallTrainLane::finished() const {
  return opt_steps_ >= s_.steps && eval_done_ >= eval_total_;
}

void SmallTrainLane::append_metrics(const nlohmann::json& line) {
  if (output_dir_.empty()) return;
  const std::string path = output_dir_ + "/metrics.jsonl";
  const bool append = metrics_opened_ || metrics_append_;
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  metrics_opened_ = true;
  if (!out) throw LaneError("lane smalltrain: cannot write " + path);
  out << line.dump() << "\n";
}

void SmallTrainLane::upload_tokens() {
  const std::size_t bytes = inputs_host_.size() * sizeof(std::int32_t);
  stage_->backend().copy(inputs_, inputs_host_.data(), bytes, stage_->stream());
  stage_->backend().copy(targets_, targets_host_.data(), bytes, stage_->stream());
}

void SmallTrainLane::run_eval_batch() {
  fill_eval_batch(store_->valid(), s_.seq_len, s_.micro_batch, static_cast<int>(eval_done_),
                  inputs_host_.data(), targets_host_.data());
  upload_tokens();
  const double sum = stage_->forward(params_, nullptr, acts_, scratch_, inputs_, nullptr, targets_, 1.f);
  eval_sum_ += sum / (static_cast<double>(s_.micro_batch) * s_.seq_len);
  ++eval_done_;
  if (eval_done_ == eval_total_) {
    val_loss_ = eval_sum_ / static_cast<double>(eval_total_);
    append_metrics({{"step", opt_steps_}, {"val_loss", *val_loss_}});
  }
}

double SmallTrainLane::step(LaneContext&) {
  if (finished()) return 0;
  const std::int64_t BT = static_cast<std::int64_t>(s_.micro_batch) * s_.seq_len;
  if (opt_steps_ >= s_.steps) {  // training done: one validation batch
    run_eval_batch();
    tokens_ += BT;
    return static_cast<double>(BT);
  }
  if (micro_in_step_ == 0)
    stage_->backend().memset_zero(grads_, stage_->layout().total_floats() * sizeof(float), stage_->stream());
  sampler_->next_batch(s_.micro_batch, inputs_host_.data(), targets_host_.data());
  upload_tokens();
  windows_drawn_ += static_cast<std::uint64_t>(s_.micro_batch);
  const float loss_scale = 1.0f / static_cast<float>(BT * s_.accumulation);
  const double sum =
      stage_->forward(params_, grads_, acts_, scratch_, inputs_, nullptr, targets_, loss_scale);
  stage_->backward(params_, grads_, acts_, scratch_, inputs_, nullptr, nullptr);
  if (!std::isfinite(sum)) throw LaneError("lane smalltrain: loss is not finite at step " +
                                           std::to_string(opt_steps_ + 1));
  step_loss_sum_ += sum;
  ++micro_in_step_;
  ++microbatches_;
  tokens_ += BT;
  if (micro_in_step_ == s_.accumulation) {
    const double norm =
        std::sqrt(grad_sum_squares(stage_->layout(), grads_, stage_->backend(), stage_->stream()));
    const float scale = clip_scale(norm, static_cast<float>(s_.grad_clip));
    adamw_step(stage_->layout(), params_, grads_, m_, v_, AdamWConfig{}, static_cast<float>(s_.lr),
               static_cast<int>(opt_steps_ + 1), scale, stage_->backend(), stage_->stream());
    const double loss = step_loss_sum_ / static_cast<double>(BT * s_.accumulation);
    ++opt_steps_;
    losses_.push_back(loss);
    micro_in_step_ = 0;
    step_loss_sum_ = 0;
    append_metrics({{"step", opt_steps_}, {"loss", loss}, {"lr", s_.lr}, {"grad_norm", norm},
                    {"tokens", tokens_}});
  }
  return static_cast<double>(BT);
}

std::string SmallTrainLane::save() const {
  if (!stage_) throw LaneError("lane smalltrain: save() before setup()");
  StateWriter w;
  w.bytes(kStateMagic, sizeof kStateMagic);
  // What the state is only valid for.
  for (int v : {s_.model.layers, s_.model.d_model, s_.model.heads, s_.seq_len, s_.model.vocab_size,
                s_.micro_batch, s_.accumulation})
    w.put<std::int32_t>(v);
  w.put<std::uint64_t>(s_.seed);
  w.put<std::int64_t>(opt_steps_);
  w.put<std::int64_t>(micro_in_step_);
  w.put<std::int64_t>(microbatches_);
  w.put<std::uint64_t>(windows_drawn_);
  w.put<double>(step_loss_sum_);
  w.put<std::int64_t>(tokens_);
  w.put<std::int64_t>(eval_done_);
  w.put<double>(eval_sum_);
  w.put<std::uint8_t>(val_loss_ ? 1 : 0);
  w.put<double>(val_loss_.value_or(0.0));
  w.put<std::uint64_t>(losses_.size());
  w.bytes(losses_.data(), losses_.size() * sizeof(double));
  const std::size_t P = stage_->layout().total_floats();
  w.put<std::uint64_t>(P);
  std::vector<float> host(P);  // copied out: the buffers may be device memory
  for (const float* buf : {params_, grads_, m_, v_}) {
    stage_->backend().copy(host.data(), buf, P * sizeof(float), stage_->stream());
    stage_->stream().synchronize();
    w.bytes(host.data(), P * sizeof(float));
  }
  return w.take();
}

void SmallTrainLane::load(const std::string& state) {
  if (!stage_) throw LaneError("lane smalltrain: load() before setup()");
  StateReader r(state, "smalltrain");
  char magic[sizeof kStateMagic];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kStateMagic, sizeof magic) != 0)
    throw LaneError("lane smalltrain: saved state is not a smalltrain state");
  const char* names[] = {"layers", "d_model", "heads", "seq_len", "vocab_size", "micro_batch",
                         "accumulation"};
  const int now[] = {s_.model.layers, s_.model.d_model, s_.model.heads, s_.seq_len,
                     s_.model.vocab_size, s_.micro_batch, s_.accumulation};
  for (int i = 0; i < 7; ++i) {
    const auto saved = r.get<std::int32_t>();
    if (saved != now[i])
      throw LaneError("lane smalltrain: saved state has " + std::string(names[i]) + " = " +
                      std::to_string(saved) + ", the options say " + std::to_string(now[i]));
  }
  if (r.get<std::uint64_t>() != s_.seed)
    throw LaneError("lane smalltrain: saved state was made with another seed");
  const auto opt_steps = r.get<std::int64_t>();
  const auto micro_in_step = r.get<std::int64_t>();
  const auto microbatches = r.get<std::int64_t>();
  const auto windows = r.get<std::uint64_t>();
  const auto step_loss_sum = r.get<double>();
  const auto tokens = r.get<std::int64_t>();
  const auto eval_done = r.get<std::int64_t>();
  const auto eval_sum = r.get<double>();
  const bool has_val = r.get<std::uint8_t>() != 0;
  const auto val = r.get<double>();
  const auto n_losses = r.get<std::uint64_t>();
  if (n_losses != static_cast<std::uint64_t>(opt_steps))
    throw LaneError("lane smalltrain: saved state is inconsistent (losses)");
  std::vector<double> losses(n_losses);
  r.bytes(losses.data(), n_losses * sizeof(double));
  const std::size_t P = stage_->layout().total_floats();
  if (r.get<std::uint64_t>() != P) throw LaneError("lane smalltrain: saved state has another parameter count");
  std::vector<std::vector<float>> saved(4, std::vector<float>(P));
  for (std::vector<float>& host : saved) r.bytes(host.data(), P * sizeof(float));
  if (!r.at_end()) throw LaneError("lane smalltrain: saved state has trailing bytes");
  float* const buffers[] = {params_, grads_, m_, v_};
  for (std::size_t i = 0; i < saved.size(); ++i)
    stage_->backend().copy(buffers[i], saved[i].data(), P * sizeof(float), stage_->stream());
  stage_->stream().synchronize();

  opt_steps_ = opt_steps;
  micro_in_step_ = micro_in_step;
  microbatches_ = microbatches;
  step_loss_sum_ = step_loss_sum;
  tokens_ = tokens;
  eval_done_ = eval_done;
  eval_sum_ = eval_sum;
  val_loss_ = has_val ? std::optional<double>(val) : std::nullopt;
  losses_ = std::move(losses);
  // The sampler's position: a fresh sampler with the same seed, advanced by the windows drawn
  // (each window costs one draw; copying seq_len tokens per replayed window is cheap).
  sampler_ = std::make_unique<WindowSampler>(store_->train(), s_.seq_len, s_.seed);
  for (std::uint64_t i = 0; i < windows; ++i) sampler_->next_batch(1, inputs_host_.data(), targets_host_.data());
  windows_drawn_ = windows;
  metrics_append_ = true;
}

nlohmann::json SmallTrainLane::report() const {
  nlohmann::json j;
  j["steps"] = opt_steps_;
  j["target_steps"] = s_.steps;
  j["microbatches"] = microbatches_;
  j["tokens"] = tokens_;
  if (!losses_.empty()) {
    j["first_loss"] = losses_.front();
    j["last_loss"] = losses_.back();
  }
  if (val_loss_) j["val_loss"] = *val_loss_;
  if (stage_) {
    j["parameter_floats"] = stage_->layout().total_floats();
    j["arena_bytes"] = stage_ ? nlohmann::json(arena_bytes_needed()) : nlohmann::json(nullptr);
  }
  j["model"] = {{"layers", s_.model.layers}, {"d_model", s_.model.d_model},
                {"heads", s_.model.heads},   {"seq_len", s_.seq_len},
                {"vocab_size", s_.model.vocab_size}};
  return j;
}

void SmallTrainLane::teardown(LaneContext&) {}

std::unique_ptr<Lane> make_smalltrain_lane() { return std::make_unique<SmallTrainLane>(); }

}  // namespace pipelane
