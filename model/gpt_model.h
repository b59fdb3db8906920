// One pipeline stage of a GPT-2: a range of layers plus optionally the embedding and the head.
// The whole model is the stage that holds everything. Memory comes from the caller's arenas,
// laid out from size tables: parameters/gradients/moments (ParamLayout), activations per
// in-flight microbatch (MicrobatchActivations), and scratch shared by every microbatch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/gpt_layout.h"
#include "model/tensor_parallel.h"
#include "runtime/arena.h"

namespace pipelane {

struct LayerActivations {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res_attn;
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res_out;
};

// Everything forward keeps for backward, for one microbatch of B x T tokens. Under tensor
// parallelism qkv/att/atty hold this rank's heads only ([N,3C/tp], [B,NH/tp,T,T], [N,C/tp]) and
// fch/fch_gelu its hidden units ([N,4C/tp]); everything [N,C] is replicated.
struct MicrobatchActivations {
  int B = 0, T = 0;
  float* input = nullptr;  // [B,T,C]: embedding output, or the activation received from upstream
  std::vector<LayerActivations> layers;
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;
  float* dlnf = nullptr;            // [B,T,C] head gradient, computed during forward (see below)
  bool head_grad_ready = false;
  const float* output() const { return layers.empty() ? input : layers.back().res_out; }
};

// Buffers reused by every microbatch's forward and backward pass.
struct StageScratch {
  float *proj = nullptr;   // [N,C] forward projection output before the residual add
  float *dres = nullptr;   // [N,C] gradient of the residual stream
  float *dtmp = nullptr;   // [N,C]
  float *dqkv = nullptr;   // [N,3C]
  float *d4c = nullptr;    // [N,4C]
  float *logits = nullptr; // lm_head_chunk_rows x Vp (tp > 1: the vocab-parallel head's scratch)
};

class GptStage {
 public:
  // tp: this rank's tensor-parallel group, or null for no tensor parallelism (tp = 1). The stage
  // then holds this rank's shard of every tensor (layout().tp(); see tensor_parallel.h) and calls
  // the group's collectives inside forward and backward, so every rank of the group must run the
  // same calls in the same order. The comm must outlive the stage.
  GptStage(const GptConfig& cfg, StageRange range, TensorParallelComm* tp = nullptr);

  const ParamLayout& layout() const { return layout_; }
  const GptConfig& config() const { return layout_.config(); }
  const StageRange& range() const { return layout_.range(); }

  // Bytes for one microbatch's activations / for the shared scratch (arena alignment included).
  std::size_t activation_bytes(int B, int T) const;
  std::size_t scratch_bytes(int B, int T) const;
  MicrobatchActivations allocate_activations(Arena& arena, int B, int T) const;
  StageScratch allocate_scratch(Arena& arena, int B, int T) const;

  // GPT-2 initialisation. Each tensor's values depend only on (seed, tensor name), so a stage
  // initialises exactly the slice of the whole model it holds. A tensor-parallel shard is the
  // slice of the full tensor drawn from the same stream, so any tp trains the same model.
  static void init_parameters(const ParamLayout& layout, float* params, std::uint64_t seed);

  // Forward of one microbatch. First stage: `tokens`; otherwise `input` [B,T,C] is copied in.
  // Last stage: `targets` gives per-position losses; returns their sum (0 on other stages).
  // When `grads` is non-null (training), the head's backward for d(loss_scale * sum(losses)) runs
  // fused with its forward, as in llm.c: the logits block is consumed while it is hot instead of
  // being stored or recomputed. That adds the head's share to grads (wte) already here, so
  // gradients must not be zeroed between a microbatch's forward and its backward.
  double forward(const float* params, float* grads, MicrobatchActivations& acts,
                 StageScratch& scratch, const std::int32_t* tokens, const float* input,
                 const std::int32_t* targets, float loss_scale) const;

  // Backward of the same microbatch. Non-last stages: `grad_output` [B,T,C] is the gradient of
  // this stage's output. Parameter gradients accumulate into `grads`; non-first stages write the
  // input gradient to `grad_input`.
  void backward(const float* params, float* grads, MicrobatchActivations& acts,
                StageScratch& scratch, const std::int32_t* tokens, const float* grad_output,
                float* grad_input) const;

  // Logits [B*T, Vp] of the last forward (head stage only; for tests and inference). Under tensor
  // parallelism: this rank's columns [B*T, layout().vocab_local()], global columns starting at
  // layout().vocab_begin().
  void logits(const float* params, const MicrobatchActivations& acts, float* out) const;

 private:
  template <typename Alloc>
  MicrobatchActivations plan_activations(Alloc&& alloc, int B, int T) const;
  template <typename Alloc>
  StageScratch plan_scratch(Alloc&& alloc, int B, int T) const;

  void reduce_sum(float* data, std::size_t n) const;

  ParamLayout layout_;
  TensorParallelComm* tp_ = nullptr;  // null when tp == 1
};

}  // namespace pipelane
