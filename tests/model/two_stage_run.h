// A two-stage pipeline of GptStages run stage after stage in one thread: stage 0 holds layers
// [0, 2) with the embedding, stage 1 layers [2, 4) with the head; kMicrobatches microbatches of
// kB x kT tokens (seeded, the same for every caller) go forward through both, then backward, in
// one of three orders. Shared by the recompute and the sequence-parallel tests, which compare
// runs of it that differ in one feature.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gpt_model.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane::two_stage_run {

constexpr int kB = 2, kT = 8, kMicrobatches = 2;

// The models it runs: a GPT-2 of 4 layers (d 32, 4 heads, 61 tokens) and the same as a Llama
// (RMSNorm, RoPE, SwiGLU of width 48, 2 kv heads).
inline GptConfig gpt2_tiny() {
  GptConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = kT;
  c.vocab_size = 61;
  return c;
}

inline GptConfig llama_tiny() {
  GptConfig c = gpt2_tiny();
  c.apply_arch_defaults(ModelArch::Llama);
  c.kv_heads = 2;
  c.ffn_hidden = 48;
  return c;
}

// Combined: backward() per microbatch; SplitInOrder: backward_input then backward_weight per
// microbatch; AllBThenW: every microbatch's backward_input, then every backward_weight.
enum class Order { Combined, SplitInOrder, AllBThenW };

struct Stage {
  std::unique_ptr<GptStage> model;
  std::unique_ptr<Arena> arena;
  std::vector<float> params, grads;
  // Empty, or params rounded to bf16 (with_bf16_weights): the copy the GEMMs then read.
  std::vector<std::uint16_t> params_bf16;
  std::vector<MicrobatchActivations> acts;
  StageScratch scratch;
  StageWeights weights() const { return {params.data(), params_bf16.empty() ? nullptr : params_bf16.data()}; }
};

// Gives every stage a bf16 copy of its parameters, rounded by `backend` (the copy `[train]
// gemm_weights = bf16` makes in the executor); `zeroed`: a copy of zeros instead (what the GEMMs
// read shows).
inline void with_bf16_weights(std::vector<Stage>& st, Backend& backend, Stream& stream, bool zeroed = false) {
  for (Stage& s : st) {
    s.params_bf16.assign(s.params.size(), 0);
    if (!zeroed) backend.cast_to_bf16(s.params_bf16.data(), s.params.data(), s.params.size(), stream);
  }
  stream.synchronize();
}

// The two stages, parameters from seed 11, each arena sized for kMicrobatches in flight. On the
// fixture's CPU backend, or on `backend` and `stream` (which outlive the stages) with `storage`.
inline std::vector<Stage> make_stages(const GptConfig& c, TensorParallelComm* comm, const RecomputeOptions& rc,
                                      bool sequence_parallel, Order order, const std::string& arena_name,
                                      DType storage = DType::F32, Backend* own_backend = nullptr,
                                      Stream* own_stream = nullptr) {
  Backend& backend = own_backend ? *own_backend : testing::cpu_backend();
  Stream& stream = own_stream ? *own_stream : testing::cpu_stream();
  const bool split = order != Order::Combined;
  const std::vector<StageRange> ranges = {{0, 2, true, false}, {2, 4, false, true}};
  std::vector<Stage> st(ranges.size());
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    Stage& s = st[k];
    s.model = std::make_unique<GptStage>(c, ranges[k], backend, stream, comm, rc, sequence_parallel, storage);
    s.arena = std::make_unique<Arena>(arena_name, kMicrobatches * s.model->activation_bytes(kB, kT, split) +
                                                      s.model->scratch_bytes(kB, kT));
    s.params.assign(s.model->layout().total_floats(), 0.f);
    s.grads.assign(s.params.size(), 0.f);
    GptStage::init_parameters(s.model->layout(), s.params.data(), 11);
    for (int m = 0; m < kMicrobatches; ++m) s.acts.push_back(s.model->allocate_activations(*s.arena, kB, kT, split));
    s.scratch = s.model->allocate_scratch(*s.arena, kB, kT);
  }
  return st;
}

struct Passes {
  std::vector<double> losses;                  // per microbatch
  std::vector<std::vector<float>> grad_input;  // per microbatch: stage 1's, `message` floats
};

// Every microbatch forward and backward through `st` in `order`; the stages' grads accumulate.
inline Passes run_passes(std::vector<Stage>& st, const GptConfig& c, Order order, std::size_t message) {
  const bool split = order != Order::Combined;
  std::mt19937 g(7);
  std::vector<std::vector<std::int32_t>> tokens(kMicrobatches), targets(kMicrobatches);
  for (int m = 0; m < kMicrobatches; ++m)
    for (int i = 0; i < kB * kT; ++i) tokens[m].push_back(g() % c.vocab_size), targets[m].push_back(g() % c.vocab_size);
  Passes r;
  r.losses.assign(kMicrobatches, 0.0);
  r.grad_input.assign(kMicrobatches, std::vector<float>(message));
  const float scale = 1.0f / (kMicrobatches * kB * kT);
  auto F = [&](int m) {
    r.losses[m] += st[0].model->forward(st[0].weights(), st[0].grads.data(), st[0].acts[m], st[0].scratch,
                                        tokens[m].data(), nullptr, nullptr, scale);
    r.losses[m] += st[1].model->forward(st[1].weights(), st[1].grads.data(), st[1].acts[m], st[1].scratch,
                                        nullptr, st[0].acts[m].output(), targets[m].data(), scale);
  };
  auto B = [&](int m) {
    const std::int32_t* tok[] = {tokens[m].data(), nullptr};
    const float* gout[] = {r.grad_input[m].data(), nullptr};
    float* gin[] = {nullptr, r.grad_input[m].data()};
    for (int k = 1; k >= 0; --k) {
      Stage& s = st[k];
      if (split) s.model->backward_input(s.weights(), s.grads.data(), s.acts[m], s.scratch, tok[k], gout[k], gin[k]);
      else s.model->backward(s.weights(), s.grads.data(), s.acts[m], s.scratch, tok[k], gout[k], gin[k]);
    }
  };
  auto W = [&](int m) {
    for (int k = 1; k >= 0; --k)
      st[k].model->backward_weight(st[k].weights(), st[k].grads.data(), st[k].acts[m], st[k].scratch,
                                   k == 0 ? tokens[m].data() : nullptr);
  };
  for (int m = 0; m < kMicrobatches; ++m) {
    F(m);
    B(m);
    if (order == Order::SplitInOrder) W(m);
  }
  if (order == Order::AllBThenW)
    for (int m = 0; m < kMicrobatches; ++m) W(m);
  return r;
}

}  // namespace pipelane::two_stage_run
