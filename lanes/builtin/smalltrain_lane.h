// smalltrain: trains a second, small GPT (a draft model, a probe) inside the bubbles of the main
// training, with pipelane's own model code (GptStage, AdamW, WindowSampler) on the lane's own arena.
//
// [lane.smalltrain] options (defaults):
//   data = data/jargon.h5    token store (or anything TokenStore::open reads)
//   layers = 2, d_model = 64, heads = 2, seq_len = 64, vocab_size = 256   the model
//   micro_batch = 2          rows per microbatch (a step: ~3 ms at the default model, small
//                            enough to fit most pipeline gaps)
//   accumulation = 2         microbatches per optimizer step (4 rows per update)
//   lr = 1e-3                constant learning rate (AdamW, betas 0.9/0.95, weight decay 0.1)
//   grad_clip = 1.0          global-norm clipping (0: off)
//   steps = 200              optimizer steps; then (after validation) the lane is finished
//   eval_batches = 4         validation batches run after the last step when the data has a
//                            validation split (0: none); one batch per step()
//   seed = ctx.seed + rank   parameter init (GptStage::init_parameters) and the WindowSampler
//
// One step() = one microbatch (forward + backward; AdamW after `accumulation` of them), or one
// validation batch at the end. Work unit: tokens. Every byte of the model (parameters, gradients,
// AdamW moments, activations, scratch, token buffers) comes from ctx.arena: setup() fails with a
// LaneError naming the bytes it needs when the quota is too small. No globals: any number of
// smalltrain lanes can live next to training's model in one process.
//
// Outputs: ctx.output_dir/metrics.jsonl, one line per optimizer step {"step", "loss", "lr",
// "grad_norm", "tokens"}, and {"val_loss"} at the end. save() holds the parameters, gradients (a
// step may be half accumulated), AdamW moments, counters and the sampler position (windows drawn;
// load() replays them), so a restored lane continues with bit-identical losses.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/token_store.h"
#include "datasets/window_sampler.h"
#include "lanes/lane.h"
#include "model/adamw.h"
#include "model/gpt_model.h"

namespace pipelane {

struct SmallTrainSettings {
  std::string data = "data/jargon.h5";
  GptConfig model;  // max_seq_len = seq_len
  int seq_len = 64;
  int micro_batch = 2;
  int accumulation = 2;
  double lr = 1e-3;
  double grad_clip = 1.0;
  std::int64_t steps = 200;
  int eval_batches = 4;
  std::uint64_t seed = 0;
};

class SmallTrainLane : public Lane {
 public:
  std::string name() const override { return "smalltrain"; }
  std::string work_unit() const override { return "tokens"; }
  // Its buffers are touched through backend copies and ops only: on a GPU it runs there.
  bool runs_on_device() const override { return true; }
  void setup(LaneContext& ctx) override;
  double step(LaneContext& ctx) override;
  bool finished() const override;
  std::string save() const override;
  void load(const std::string& state) override;
  nlohmann::json report() const override;
  void teardown(LaneContext& ctx) override;

  // For tests and tools.
  const SmallTrainSettings& settings() const { return s_; }
  const std::vector<double>& losses() const { return losses_; }  // per optimizer step
  std::optional<double> val_loss() const { return val_loss_; }
  const ParamLayout& layout() const { return stage_->layout(); }
  const float* parameters() const { return params_; }  // in the arena (device memory on a GPU)
  // Bytes setup() takes from the arena for these settings (parameters x4, activations, scratch,
  // token buffers), alignment included.
  std::size_t arena_bytes_needed() const;  // after setup()

 private:
  void append_metrics(const nlohmann::json& line);
  void run_eval_batch();
  void upload_tokens();  // the host token buffers into the arena's, in the lane stream's order

  SmallTrainSettings s_;
  std::string output_dir_;
  std::unique_ptr<TokenStore> store_;
  std::unique_ptr<GptStage> stage_;
  std::unique_ptr<WindowSampler> sampler_;
  float *params_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  MicrobatchActivations acts_;
  StageScratch scratch_;
  std::int32_t *inputs_ = nullptr, *targets_ = nullptr;
  std::vector<std::int32_t> inputs_host_, targets_host_;  // where the sampler writes
  std::int64_t eval_total_ = 0;  // validation batches to run at the end (0: no validation)

  // Progress (saved).
  std::int64_t opt_steps_ = 0;       // optimizer steps done
  std::int64_t micro_in_step_ = 0;   // microbatches accumulated into the current step
  std::int64_t microbatches_ = 0;    // microbatches done
  std::uint64_t windows_drawn_ = 0;  // sampler position
  double step_loss_sum_ = 0;         // sum of losses of the current step's microbatches
  std::int64_t tokens_ = 0;          // training + validation tokens processed
  std::vector<double> losses_;
  std::int64_t eval_done_ = 0;
  double eval_sum_ = 0;
  std::optional<double> val_loss_;

  bool metrics_append_ = false;  // load() ran: keep the lines a previous run wrote
  bool metrics_opened_ = false;
};

std::unique_ptr<Lane> make_smalltrain_lane();

}  // namespace pipelane
