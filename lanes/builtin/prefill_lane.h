// prefill: a BubbleTea-style prefill service in the bubbles of training. Prompt requests arrive
// (a trace file or a seeded Poisson process) and wait in a FIFO queue; each step() prefills one
// chunk of the request at the head of the queue on a frozen GPT and, after a request's last chunk,
// produces its first token (argmax of the last position's logits).
//
// [lane.prefill] options (defaults):
//   layers = 2, d_model = 64, heads = 2, seq_len = 64, vocab_size = 256   the model (seq_len is
//                          the longest prompt: the position table and the KV cache's length)
//   seed = ctx.seed + rank weights (GptStage::init_parameters) and prompt tokens
//   chunk_tokens = 64      prompt tokens prefilled per step
//   trace = PATH           CSV lines "arrival_ms,prompt_tokens"; '#' starts a comment; blank lines
//                          are skipped; requests are served in arrival order (stable). A bad line
//                          is a LaneError "PATH:LINE: ...". Excludes the generator's options.
//   rate_per_s = 20, requests = 64, prompt_min = 8, prompt_max = seq_len   the Poisson generator
//                          (used without a trace; arrivals from `seed`)
// Arrival times are milliseconds after setup() on a steady clock (tests inject their own).
//
// Chunked prefill with a KV cache: the lane runs the model itself with runtime ops over
// GptStage's parameter layout (no model/ API changes). A chunk of positions [p0, p1) is embedded
// (wte + wpe at absolute positions), and per layer: ln1, c_attn (qkv of the chunk), K and V are
// appended to the layer's cache (rows p0..p1), causal attention of the chunk's queries over
// cache rows [0, p] for query position p, c_proj + residual, ln2, MLP + residual. After the
// request's last chunk: ln_f on the last position, the tied head (lm_head_logits), argmax over the
// real vocabulary. Mathematically the same as GptStage::forward over the whole prompt (tests
// compare logits and the argmax); only float rounding differs (exp, matmul blocking by rows).
// The cache holds one request (FIFO: one request is prefilled at a time).
//
// Memory: parameters (frozen, no gradients), the KV cache (layers x 2 x seq_len x d_model) and the
// chunk buffers come from ctx.arena. Weights hook: parameters() + layout() (GptStage's flat
// layout) after setup(), for checkpoint code that loads a trained model's weights.
//
// save()/load(): the completed requests (with their TTFT and first token), the lane's clock
// (elapsed ms: arrivals keep their times relative to the original start) and active time. A
// request that was part-way through prefill restarts from its first chunk (the KV cache is not
// saved); its result is the same.
//
// Work unit: prompt tokens. report(): requests done/total, requests/s over the active time (sum of
// the steps' durations) and over wall time (start to the last completion, or to now), TTFT
// p50/p99 (completion minus arrival, nearest-rank), queue length (arrived, not done), tokens.
// Each completed request is appended to ctx.output_dir/requests.jsonl.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lanes/lane.h"
#include "model/gpt_model.h"

namespace pipelane {

struct PrefillRequest {
  std::int64_t id = 0;  // order in the trace / the generator
  double arrival_ms = 0;
  int prompt_tokens = 0;
};

struct PrefillResult {
  std::int64_t id = 0;
  double arrival_ms = 0, done_ms = 0;  // ms after the lane's start
  int prompt_tokens = 0;
  std::int32_t first_token = 0;
  double ttft_ms() const { return done_ms - arrival_ms; }
};

struct PrefillSettings {
  GptConfig model;  // max_seq_len = seq_len
  int seq_len = 64;
  int chunk_tokens = 64;
  std::uint64_t seed = 0;
  std::string trace;
  double rate_per_s = 20;
  int requests = 64;
  int prompt_min = 8, prompt_max = 64;
};

// The trace's requests sorted by arrival (stable); LaneError "PATH:LINE: ..." on a malformed line,
// a negative or non-finite arrival, prompt_tokens outside [1, max_prompt_tokens]; LaneError when
// the file cannot be read or holds no request.
std::vector<PrefillRequest> read_prefill_trace(const std::string& path, int max_prompt_tokens);
// A Poisson process: exponential gaps of mean 1000/rate_per_s ms, lengths uniform in
// [prompt_min, prompt_max]; deterministic from the seed (own generator, platform independent).
std::vector<PrefillRequest> poisson_prefill_requests(double rate_per_s, int requests, int prompt_min,
                                                     int prompt_max, std::uint64_t seed);
// The prompt of request `id`: tokens in [0, vocab_size), deterministic from (seed, id).
void prefill_prompt_tokens(std::uint64_t seed, std::int64_t id, int length, int vocab_size,
                           std::int32_t* out);
// Nearest-rank percentile (p in (0, 100]) of unsorted values; 0 for none.
double percentile_nearest_rank(std::vector<double> values, double p);

class PrefillLane : public Lane {
 public:
  using Clock = std::function<double()>;  // milliseconds, any origin, never decreasing

  std::string name() const override { return "prefill"; }
  std::string work_unit() const override { return "prompt tokens"; }
  // Its buffers are touched through backend copies and ops only: on a GPU it runs there.
  bool runs_on_device() const override { return true; }
  void setup(LaneContext& ctx) override;
  double step(LaneContext& ctx) override;
  bool finished() const override;
  std::string save() const override;
  void load(const std::string& state) override;
  nlohmann::json report() const override;

  // Replaces the steady clock (call before setup()).
  void set_clock(Clock clock) { clock_ = std::move(clock); }
  // Weights hook (after setup()): the frozen model's flat parameters in GptStage's layout (in the
  // lane's arena: device memory on a device backend, reached through the backend's copies).
  const ParamLayout& layout() const { return stage_->layout(); }
  float* parameters() { return params_; }
  const PrefillSettings& settings() const { return s_; }
  const std::vector<PrefillRequest>& requests() const { return requests_; }
  const std::vector<PrefillResult>& results() const { return results_; }
  // Logits [padded_vocab] of the last position of the most recently completed request.
  const float* last_logits() const { return logits_host_.data(); }
  std::size_t queue_length() const;
  static std::size_t arena_bytes_needed(const PrefillSettings& s);

 private:
  double now_ms() const;  // since the lane's start
  void prefill_chunk(int p0, int p1);

  PrefillSettings s_;
  Clock clock_;
  double start_ms_ = 0;
  std::string output_dir_;
  std::unique_ptr<GptStage> stage_;
  std::vector<PrefillRequest> requests_;
  std::vector<PrefillResult> results_;  // completed, in order: the head of the queue is next
  int pos_ = 0;                         // prompt tokens of the head request prefilled so far
  double active_ms_ = 0;
  std::int64_t tokens_ = 0;

  // Arena buffers.
  float* params_ = nullptr;
  std::vector<float*> kcache_, vcache_;  // per layer [seq_len, C]
  std::int32_t* prompt_ = nullptr;       // [seq_len]
  float *x_ = nullptr, *ln_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr, *qkv_ = nullptr,
        *atty_ = nullptr, *proj_ = nullptr, *fch_ = nullptr, *fchg_ = nullptr, *scores_ = nullptr,
        *logits_ = nullptr;
  // Host sides of the two buffers the host reads or writes: the prompt's tokens are made here and
  // copied in, the last logits copied out for the argmax.
  std::vector<std::int32_t> prompt_host_;
  std::vector<float> logits_host_;
};

std::unique_ptr<Lane> make_prefill_lane();

}  // namespace pipelane
