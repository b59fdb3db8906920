// One pipeline stage of a GPT-2 or Llama-family model (GptConfig::arch and its keys: norm,
// position, mlp, kv_heads, tie_embeddings, bias): a range of layers plus optionally the embedding
// and the head. Both families run through the same code; what differs is chosen per sublayer
// (gpt_block.cpp).
// The whole model is the stage that holds everything. Memory comes from the caller's arenas
// (backend memory), laid out from size tables: parameters/gradients/moments (ParamLayout),
// activations per in-flight microbatch (MicrobatchActivations), and scratch shared by every
// microbatch. Every computation and copy goes through the Backend, on the stage's Stream: the
// model never dereferences a buffer, so it runs unchanged on device memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <array>
#include <functional>
#include <iterator>
#include <initializer_list>
#include <vector>

#include "model/gpt_layout.h"
#include "model/recompute.h"
#include "model/stage_weights.h"
#include "model/tensor_parallel.h"
#include "runtime/arena.h"
#include "runtime/backend.h"

namespace pipelane {

// GPT-2 family: qkv is c_attn's output [N,3CA]; fch is c_fc's output, fch_gelu its GeLU. Llama
// family: q, k, v are q_proj/k_proj/v_proj's outputs ([N,CA], [N,KV], [N,KV], KV = this rank's kv
// heads x head size; one allocation, qkv == q), after RoPE; fch is gate_proj's output (SwiGLU) or
// up_proj's (GeLU), up is up_proj's (SwiGLU only) and fch_gelu the activation fed to down_proj.
// ln*_mean are null under rmsnorm.
inline constexpr std::size_t kLayerValueSlots = 10;  // kLayerValues' entries (checked below)
struct LayerActivations {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res_attn;
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res_out;
  float *q, *k, *v, *up;
  // Split backward only (null otherwise): the gradients flowing into this layer's matmuls and
  // layernorms, written by backward_input and consumed by backward_weight. In backward order:
  //   d_res_out  [N,C]     of res_out (mlp.c_proj's output)
  //   d_fch      [N,CM]    of fch (c_fc's output), CM = 4C/tp
  //   d_ln2      [N,C]     of ln2 (all-reduced under tp)
  //   d_res_attn [N,C]     of res_attn (attn.c_proj's output)
  //   d_qkv      [N,3CA]   of qkv (c_attn's output), CA = C/tp; Llama: of q, k and v
  //   d_ln1      [N,C]     of ln1 (all-reduced under tp)
  //   d_up       [N,CM]    SwiGLU only: of up (d_fch is then gate's)
  float *d_res_out, *d_fch, *d_ln2, *d_res_attn, *d_qkv, *d_ln1, *d_up;
  // bf16 storage: the values (indexed as kLayerValues) the layer's ops write and read as bf16
  // buffers themselves (GptStage::bf16_direct_values), where they are. The fp32 member is then
  // null, or in forward the fp32 scratch the value is made in before it is kept (keep_value).
  // Null elsewhere.
  std::array<std::uint16_t*, kLayerValueSlots> bf16;
};

// bf16 storage (GptStage's `storage` = BF16): the values a layer keeps, each in bf16, indexed as
// kLayerValues (null where the layer keeps nothing of that value, or the config lacks it).
// Everything else a layer keeps stays fp32 in its LayerActivations: the norms' statistics, a
// backend's attention state when it is not the probabilities (cuDNN's softmax statistics), and
// the split backward's gradients.
inline constexpr float* LayerActivations::*kLayerValues[] = {
    &LayerActivations::ln1, &LayerActivations::qkv,  &LayerActivations::att, &LayerActivations::atty,
    &LayerActivations::res_attn, &LayerActivations::ln2, &LayerActivations::fch, &LayerActivations::up,
    &LayerActivations::fch_gelu, &LayerActivations::res_out};
inline constexpr std::size_t kLayerValueCount = std::size(kLayerValues);
static_assert(kLayerValues[kLayerValueCount - 1] == &LayerActivations::res_out, "res_out is the last value");
static_assert(kLayerValueCount == kLayerValueSlots, "LayerActivations::bf16 has a slot for every value");
// The index of `member` in kLayerValues (kLayerValueCount: not a value).
constexpr std::size_t layer_value_index(float* LayerActivations::*member) {
  for (std::size_t i = 0; i < kLayerValueCount; ++i)
    if (kLayerValues[i] == member) return i;
  return kLayerValueCount;
}
// A value as the ops write and read it: its fp32 buffer, or its bf16 one (LayerActivations::bf16).
inline ActivationOut value_out(const LayerActivations& h, float* LayerActivations::*member) {
  std::uint16_t* bf16 = h.bf16[layer_value_index(member)];
  return bf16 ? ActivationOut::of_bf16(bf16) : ActivationOut(h.*member);
}
inline ActivationIn value_in(const LayerActivations& h, float* LayerActivations::*member) {
  return value_out(h, member);
}
// q, k and v of the Llama family's split projections as the attention ops read them: the fp32
// views h.q/h.k/h.v, or their places in the one bf16 buffer of qkv ([N, CA] then [N, KV] twice).
struct QkvIn {
  ActivationIn q, k, v;
};
inline QkvIn split_qkv_in(const LayerActivations& h, std::size_t N, std::size_t CA, std::size_t KV) {
  const std::uint16_t* kept = h.bf16[layer_value_index(&LayerActivations::qkv)];
  if (!kept) return {h.q, h.k, h.v};
  const auto at = [&](std::size_t offset) { return ActivationIn::of_bf16(kept + offset); };
  return {at(0), at(N * CA), at(N * (CA + KV))};
}
// The attention's saved state as the attention ops take it.
inline ActivationOut saved_attention(const LayerActivations& h) { return value_out(h, &LayerActivations::att); }

struct StoredLayer {
  std::array<std::uint16_t*, kLayerValueCount> values{};
  std::uint16_t* res_out() const { return values[kLayerValueCount - 1]; }
};

// Everything forward keeps for backward, for one microbatch of B x T tokens. Under tensor
// parallelism qkv/att/atty hold this rank's heads only ([N,3C/tp], [B,NH/tp,T,T], [N,C/tp]) and
// fch/fch_gelu its hidden units ([N,4C/tp]); everything [N,C] is replicated. With sequence
// parallelism the residual stream is not: input, ln*, ln*_mean/rstd, res_attn, res_out (and the
// split backward's d_res_out, d_ln2, d_res_attn, d_ln1, d_input) hold only this rank's rows,
// [n,C] with n = N/tp, rows [rank*n, (rank+1)*n) of the flattened [B*T, C] (GptStage::
// sequence_rows), dlnf too (the head's gradient is reduce-scattered); lnf and losses stay
// [N,...] (the head runs on every row).
struct MicrobatchActivations {
  int B = 0, T = 0;
  float* input = nullptr;  // [B,T,C] (or this rank's rows): the embedding's output, or what upstream sent
  std::vector<LayerActivations> layers;
  // bf16 storage only (else null and empty): the input in bf16 (`input` is then null) and each
  // layer's values (layers[l] then holds only what stays fp32).
  std::uint16_t* input_bf16 = nullptr;
  std::vector<StoredLayer> stored;
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;
  float* dlnf = nullptr;            // [B,T,C] (or this rank's rows) head gradient, computed during forward (see below)
  bool head_grad_ready = false;
  // Split backward (zero-bubble B/W): set by allocate_activations(..., split_backward = true).
  bool split_backward = false;
  float* d_input = nullptr;          // [B,T,C] first stage, split only: the embedding's gradient
  bool weight_grad_pending = false;  // backward_input ran, backward_weight has not yet
  // The stage's output as sent downstream: fp32, or bf16 under bf16 storage (GptStage::storage).
  const void* output() const {
    if (input_bf16) return stored.empty() ? static_cast<const void*>(input_bf16) : stored.back().res_out();
    return layers.empty() ? input : layers.back().res_out;
  }
};


// Buffers reused by every microbatch's forward and backward pass.
struct StageScratch {
  float *proj = nullptr;   // [N,C] forward projection output before the residual add
  float *dres = nullptr;   // [N,C] gradient of the residual stream
  float *dtmp = nullptr;   // [N,C]
  float *dqkv = nullptr;   // [N,3C] (Llama family: dq, dk, dv)
  float *d4c = nullptr;    // [N,4C] (the MLP width)
  float *logits = nullptr; // lm_head_chunk_rows x Vp (tp > 1: the vocab-parallel head's scratch)
  // Only where the config needs them (null otherwise):
  float *dtmp2 = nullptr;  // [N,C] the second input gradient of split q/k/v or gate/up, summed into dtmp
  float *dgate = nullptr, *dup = nullptr;  // [N,CM] SwiGLU's gate and up gradients
  float *rope = nullptr;   // [max_seq_len, head_size] RoPE's cos/sin table (model/rope_table.h), filled once
  // Recomputation's workspace (model/recompute.h), shared by every microbatch like the rest:
  // selective: one layer's attention-core state and a throwaway copy of its output [N,CA];
  // full: the forward activations of the largest group of layers recomputed together (under bf16
  // storage their probabilities in bf16 where the backend takes them so: bf16[att]).
  float *recompute_att = nullptr, *recompute_atty = nullptr;
  std::uint16_t* recompute_att_bf16 = nullptr;  // recompute_att in bf16 (GptStage::bf16_probabilities)
  std::vector<LayerActivations> recompute_layers;
  // Sequence parallelism only: the all-gathered norm output [N,C] a column-parallel layer reads
  // (forward, and again for its weight gradient), and the all-gathered residual gradient [N,C].
  float *gathered = nullptr, *dres_full = nullptr;
  // bf16 storage only: the fp32 layer a layer's forward writes the values into that the ops do
  // not keep in bf16 themselves (bf16_direct_values), and its backward reads them widened from
  // (one; empty when every layer is a full recompute's or every value is kept directly); a
  // layer's fp32 input [n,C]: in forward the stage's input or the previous layer's output, which
  // is also where a layer makes res_attn and then its own output (layer_forward reads its input
  // only before), in backward its bf16 copy widened; the fp32 input gradient before it is sent in
  // bf16 [n,C].
  std::vector<LayerActivations> storage_layers;
  float *storage_x = nullptr, *storage_dx = nullptr;
};

class GptStage {
 public:
  // tp: this rank's tensor-parallel group, or null for no tensor parallelism (tp = 1). The stage
  // then holds this rank's shard of every tensor (layout().tp(); see tensor_parallel.h) and calls
  // the group's collectives inside forward and backward, so every rank of the group must run the
  // same calls in the same order. Ops run on `stream` of `backend`. The backend, the stream and
  // the comm must outlive the stage.
  // `recompute` says what each layer keeps for backward (model/recompute.h): activations and
  // scratch are sized and used accordingly, with bit-identical results for every choice.
  // `sequence_parallel` (Korthikanti et al. 2022; needs tp > 1, std::invalid_argument otherwise)
  // splits the residual stream, the norms and the residual adds by rows over the tp ranks: each
  // rank keeps and computes only its rows, the all-reduce after each row-parallel layer becomes a
  // reduce-scatter and each column-parallel layer first all-gathers its input. Stage inputs and
  // outputs (forward's `input`, backward's `grad_output` and `grad_input`) are then this rank's
  // rows only. The norms' weight gradients become partial sums over this rank's rows:
  // reduce_sequence_parallel_gradients completes them once a step.
  // `storage` (F32, or BF16, meant with a backend of compute precision BF16 - the trainer asks
  // for both - since only then do the GEMMs read what bf16 storage keeps, and recomputation stays
  // bit-identical to none; Megatron-LM's --bf16 beside autocast's bf16 GEMM operands): under BF16 every
  // activation a layer keeps for backward is kept in bf16 (see gpt_bf16_storage.cpp for what
  // exactly), and the stage's input, output and their gradients are bf16 buffers: half the bytes
  // kept and sent. Parameters, gradients, optimizer state and the norms' statistics stay fp32.
  GptStage(const GptConfig& cfg, StageRange range, Backend& backend, Stream& stream,
           TensorParallelComm* tp = nullptr, RecomputeOptions recompute = {}, bool sequence_parallel = false,
           DType storage = DType::F32);

  const ParamLayout& layout() const { return layout_; }
  const GptConfig& config() const { return layout_.config(); }
  const StageRange& range() const { return layout_.range(); }
  Backend& backend() const { return backend_; }
  Stream& stream() const { return stream_; }
  const RecomputeOptions& recompute() const { return recompute_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // F32 or BF16: the dtype of kept activations and of the stage's input, output and gradients.
  DType storage() const { return storage_; }
  // Bytes of a stage input, output or gradient for a microbatch: sequence_rows * d_model values
  // of storage().
  std::size_t io_bytes(int B, int T) const;
  // Rows of the [B*T, C] residual stream this rank holds: B*T, or B*T/tp with sequence
  // parallelism (std::invalid_argument when tp does not divide B*T). Stage inputs, outputs and
  // their gradients are sequence_rows * d_model floats.
  int sequence_rows(int B, int T) const;
  // Sequence parallelism: all-reduces over the tp group (in rank order) the gradients of every
  // norm of the stage, which each rank accumulated over its rows only. Call once per step, after
  // the step's last backward (W) and before the gradients are read (data-parallel sync, global
  // norm, optimizer); all tp ranks together. Without sequence parallelism: nothing.
  void reduce_sequence_parallel_gradients(float* grads) const;

  // Bytes for one microbatch's activations / for the shared scratch (arena alignment included).
  // split_backward: also room for what backward_weight needs after backward_input (per layer
  // 4*N*C + 7*N*C/tp floats, plus N*C on the first stage; see LayerActivations). Stages that only
  // ever call backward() leave it false and pay nothing.
  std::size_t activation_bytes(int B, int T, bool split_backward = false) const;
  std::size_t scratch_bytes(int B, int T) const;
  MicrobatchActivations allocate_activations(Arena& arena, int B, int T,
                                             bool split_backward = false) const;
  StageScratch allocate_scratch(Arena& arena, int B, int T) const;

  // GPT-2 initialisation into HOST memory (a staging buffer of layout.total_floats() floats;
  // copy it into backend memory with Backend::copy). Each tensor's values depend only on
  // (seed, tensor name), so a stage initialises exactly the slice of the whole model it holds. A
  // tensor-parallel shard is the slice of the full tensor drawn from the same stream, so any tp
  // trains the same model.
  static void init_parameters(const ParamLayout& layout, float* params, std::uint64_t seed);

  // Forward of one microbatch. First stage: `tokens`; otherwise `input` [B,T,C] is copied in.
  // Last stage: `targets` gives per-position losses; returns their sum (0 on other stages).
  // When `grads` is non-null (training), the head's backward for d(loss_scale * sum(losses)) runs
  // fused with its forward, as in llm.c: the logits block is consumed while it is hot instead of
  // being stored or recomputed. That adds the head's share to grads (wte) already here, so
  // gradients must not be zeroed between a microbatch's forward and its backward.
  // `input`, `grad_output` and `grad_input` (here and below) hold storage() values: fp32, or bf16.
  double forward(const StageWeights& params, float* grads, MicrobatchActivations& acts, StageScratch& scratch,
                 const std::int32_t* tokens, const void* input, const std::int32_t* targets, float loss_scale) const;

  // Backward of the same microbatch. Non-last stages: `grad_output` [B,T,C] is the gradient of
  // this stage's output. Parameter gradients accumulate into `grads`; non-first stages write the
  // input gradient to `grad_input`.
  void backward(const StageWeights& params, float* grads, MicrobatchActivations& acts, StageScratch& scratch,
                const std::int32_t* tokens, const void* grad_output, void* grad_input) const;

  // The same backward split in two for zero-bubble schedules (ZB-H1), on activations allocated
  // with split_backward = true (std::logic_error otherwise). backward_input followed, any time
  // later, by backward_weight gives bit-identical gradients and grad_input to backward().
  // B: the input-gradient half. Same arguments as backward(); writes grad_input (non-first
  // stages) and keeps in `acts` the gradients flowing into each matmul/layernorm. Under tensor
  // parallelism all of the backward's collectives (the column-parallel input-gradient
  // all-reduces) happen here.
  void backward_input(const StageWeights& params, float* grads, MicrobatchActivations& acts, StageScratch& scratch,
                      const std::int32_t* tokens, const void* grad_output, void* grad_input) const;
  // W: the weight-gradient half of the same microbatch: every matmul dW/db, every LayerNorm's
  // weight/bias, ln_f, and on the first stage wte/wpe (the head's wte share was already added in
  // forward). No communication. Must follow that microbatch's backward_input (std::logic_error
  // otherwise); other microbatches' forwards and backward_inputs may run in between, but `acts`
  // stay this microbatch's until it ran (forward on them throws until then).
  void backward_weight(const StageWeights& params, float* grads, MicrobatchActivations& acts, StageScratch& scratch,
                       const std::int32_t* tokens) const;

  // Logits [B*T, Vp] of the last forward (head stage only; for tests and inference). Under tensor
  // parallelism: this rank's columns [B*T, layout().vocab_local()], global columns starting at
  // layout().vocab_begin().
  void logits(const StageWeights& params, const MicrobatchActivations& acts, float* out) const;

  // bf16 storage: the values (a mask over kLayerValues) the layer's ops write and read as bf16
  // buffers themselves, with no fp32 copy in the workspace (0 under fp32 storage).
  std::uint32_t bf16_direct_values() const { return bf16_direct_values_; }

  // Called on the host after each layer of forward, backward, backward_input and backward_weight
  // (empty: nothing). The executor hands on WAN turns here, so a turn that arrives during a
  // pass waits one layer instead of the whole pass. It must not touch the stage's buffers.
  void set_between_layers(std::function<void()> callback) { between_layers_ = std::move(callback); }

 private:
  void layer_done() const {
    if (between_layers_) between_layers_();
  }
  template <typename Alloc>
  MicrobatchActivations plan_activations(Alloc&& alloc, int B, int T, bool split_backward) const;
  template <typename Alloc>
  StageScratch plan_scratch(Alloc&& alloc, int B, int T) const;

  void reduce_sum(float* data, std::size_t n) const;

  // One layer's sublayers for either family (gpt_block.cpp). Forward: ln1 -> s.proj (attention),
  // ln2 -> s.proj (MLP), each with its bias and tp reduction. Backward: s.dres (the gradient of
  // the sublayer's output) -> s.dtmp (of its normalised input, all-reduced); _input keeps in the
  // layer's d_* buffers what _weight consumes.
  // n: rows of the residual stream this rank holds (N, or N/tp with sequence parallelism),
  // starting at row `row0` of the [N, C] stream.
  struct Dims {
    int B, T, N, C, NH, KVH, hs, CA, KV, CM, n, row0;
    std::size_t NC, nC;
  };
  Dims dims(int B, int T) const;
  void norm_forward(ActivationOut out, float* mean, float* rstd, const float* inp, const StageWeights& params,
                    std::size_t w, std::size_t b, int N) const;
  void norm_backward(float* dinp, float* grads, const float* dout, ActivationIn inp, const StageWeights& params,
                     std::size_t w, std::size_t b, const float* mean, const float* rstd, int N) const;
  void norm_backward_input(float* dinp, const float* dout, ActivationIn inp, const StageWeights& params, std::size_t w,
                           const float* mean, const float* rstd, int N) const;
  void norm_backward_params(float* grads, std::size_t w, std::size_t b, const float* dout, ActivationIn inp,
                            const float* mean, const float* rstd, int N) const;
  void rope(float* x, const float* table, int heads, int ld, const Dims& d, bool backward) const;
  // Sequence parallelism's two collectives, identities without it. gather_rows: this rank's rows
  // `part` [n,C] -> every row, in `full` [N,C] (returns `part` itself without sequence
  // parallelism). sum_partials: a column-parallel layer's partial [N,C] input gradient (or a
  // row-parallel layer's partial output) summed over the tp ranks: all-reduced in place, or
  // reduce-scattered so that its first n rows are this rank's rows of the sum.
  const float* gather_rows(const float* part, float* full, const Dims& d) const;
  ActivationIn gather_rows(ActivationIn part, float* full, const Dims& d) const;  // fp32 part under SP
  void sum_partials(float* partial, const Dims& d) const;
  void out_projection(float* out, const StageWeights& params, ActivationIn inp, std::size_t w, std::size_t b, int in,
                      const Dims& d) const;
  // ln: the normalised input, all rows (gather_rows of the layer's ln1 / ln2).
  void attention_forward(const StageWeights& params, LayerActivations& h, const LayerOffsets& o, StageScratch& s,
                         ActivationIn ln, const Dims& d) const;
  void mlp_forward(const StageWeights& params, LayerActivations& h, const LayerOffsets& o, StageScratch& s,
                   ActivationIn ln, const Dims& d) const;
  // Return the gradient of the sublayer's normalised input, summed over tp: this rank's rows of it.
  const float* attention_backward(const StageWeights& params, float* grads, const LayerActivations& h,
                                  const LayerOffsets& o, StageScratch& s, const Dims& d) const;
  const float* mlp_backward(const StageWeights& params, float* grads, const LayerActivations& h, const LayerOffsets& o,
                            StageScratch& s, const Dims& d) const;
  void attention_backward_input(const StageWeights& params, LayerActivations& h, const LayerOffsets& o, StageScratch& s,
                                const Dims& d) const;
  void mlp_backward_input(const StageWeights& params, LayerActivations& h, const LayerOffsets& o, StageScratch& s,
                          const Dims& d) const;
  void attention_backward_weight(const StageWeights& params, float* grads, const LayerActivations& h,
                                 const LayerOffsets& o, StageScratch& s, const Dims& d) const;
  void mlp_backward_weight(const StageWeights& params, float* grads, const LayerActivations& h, const LayerOffsets& o,
                           StageScratch& s, const Dims& d) const;
  // Sum of the input gradients of the matrices that read the same input (q, k, v; gate, up):
  // dx (=) = sum_i dy_i @ W_i, in order, each through matmul_backward_input's GEMM.
  void input_gradient_sum(float* dx, float* tmp, const StageWeights& params, std::initializer_list<std::size_t> weights,
                          std::initializer_list<const float*> douts, std::initializer_list<int> widths,
                          const Dims& d) const;
  void check_backend_supports_config() const;
  // Recomputation (model/recompute.h). One layer's forward from x into h (the same ops whether
  // it is the pass or a rerun); the layer's buffers for the forward pass and for backward (a
  // full-recompute layer's live in the workspace, its d_* in `a`); the input of layer l as
  // backward sees it; a full group rerun into the workspace, ending at layer l; the attention
  // core's state rebuilt for a selective layer.
    // stored: null, or (bf16 storage) where the values go instead, in bf16.
  // without: a mask over kLayerValues of values not planned in fp32 (bf16 storage's workspace
  // without what the ops keep in bf16 themselves).
  template <typename Alloc>
  LayerActivations plan_layer(Alloc&& alloc, const Dims& d, LayerKeeps keeps, bool ends_group,
                              bool split_backward, StoredLayer* stored = nullptr, std::uint32_t without = 0) const;
  void layer_forward(const StageWeights& params, LayerActivations& h, const LayerOffsets& o, StageScratch& s,
                     const float* x, const Dims& d) const;
  LayerActivations forward_view(MicrobatchActivations& a, StageScratch& s, int l) const;
  LayerActivations backward_view(MicrobatchActivations& a, StageScratch& s, int l) const;
  const float* backward_input_of(const MicrobatchActivations& a, StageScratch& s, int l, const Dims& d) const;
  void recompute_group(const StageWeights& params, MicrobatchActivations& a, StageScratch& s, int l,
                       const Dims& d) const;
  void recompute_attention_core(const LayerActivations& h, StageScratch& s, const Dims& d) const;
  // Before layer l's backward (whole, B, or W when `weight_half`): whatever recomputation it needs.
  void before_layer_backward(const StageWeights& params, MicrobatchActivations& a, StageScratch& s, int l,
                             const Dims& d, bool weight_half) const;
  void embed(const StageWeights& params, float* out, const Dims& d, StageScratch& s, const std::int32_t* tokens) const;
  // bf16 storage (gpt_bf16_storage.cpp; each does nothing, or the fp32 thing, under F32).
  bool bf16_storage() const { return storage_ == DType::BF16; }
  // bf16 storage on a backend whose attention ops write and read the probabilities as a bf16
  // buffer (supports(op, BF16)): the layers keep them there directly, with no fp32 copy in the
  // workspace; and selective recomputation's scratch for them is bf16 too.
  bool bf16_probabilities() const;
  // bf16 storage, and every op of `ops` takes bf16 buffers on this backend (supports(op, BF16)).
  bool takes_bf16(std::initializer_list<OpKind> ops) const;
  // bf16 storage without sequence parallelism on a backend whose norms write a bf16 output and
  // whose GEMMs read a bf16 input (bf16 compute): the norms write ln1 and ln2 straight into the
  // layer's bf16 buffers and the GEMMs read them there. (Under sequence parallelism the norms'
  // rows are all-gathered in fp32 first: they stay in the workspace.)
  bool bf16_norm_outputs() const;
  // bf16 storage on a backend whose norms' backward reads a bf16 input: res_attn, ln2's input, is
  // kept only in bf16 (cast once it is made, layer_forward) and read there by the backward. In
  // forward its fp32 value is in s.storage_x (forward_view).
  bool bf16_norm_inputs() const;
  // bf16 storage on a backend whose GeLU (SwiGLU) writes a bf16 output and whose GEMMs read a bf16
  // input: the MLP's activation fch_gelu goes straight into the layer's bf16 buffer, and the
  // projection after it reads it there (forward, and its weight gradient).
  bool bf16_mlp_activations() const;
  // bf16_probabilities() with GEMMs that read a bf16 input: the attention's output atty goes
  // straight into the layer's bf16 buffer too, and the projection after it reads it there.
  bool bf16_attention_output() const;
  // bf16_probabilities() (the attention ops read q/k/v in bf16 too) and, for the MLP, GeLU's
  // (SwiGLU's) backward reading its input in bf16: q/k/v and the MLP's GEMM outputs fch (and up)
  // are kept only in bf16. Their forward values are in fp32 scratch the backward does not need
  // until later (s.dqkv; s.d4c, or s.dgate and s.dup: forward_view), cast once their forward
  // readers are done (keep_value).
  bool bf16_gemm_outputs() const;
  // A value made in fp32 that bf16 storage keeps only in bf16 (its buffer in h.bf16; n elements):
  // cast there now. Nothing where the layer keeps it in fp32.
  void keep_value(const LayerActivations& h, float* LayerActivations::*member, std::size_t n) const;
  // The values (a mask over kLayerValues) the layer's ops write and read as bf16 buffers
  // (bf16_direct_values, public): the six above, decided once when the stage is made (they depend
  // on the backend and the config only).
  std::uint32_t plan_bf16_direct_values() const;
  // Elements of each kLayerValues entry of a layer (0: the config lacks it, or it stays fp32).
  std::array<std::size_t, kLayerValueCount> layer_value_sizes(const Dims& d) const;
  // After layer l's forward into h: its output rounded to bf16 in place (the next layer's input)
  // and every value it keeps stored in bf16.
  void store_layer(const MicrobatchActivations& a, const LayerActivations& h, int l, const Dims& d) const;
  // After a rerun of a layer (full recompute) into h: every value rounded to bf16 in place, the
  // values backward would have widened from storage.
  void round_layer(const LayerActivations& h, const Dims& d) const;
  // Before layer l's backward: its stored values widened into its fp32 workspace.
  void load_layer(const MicrobatchActivations& a, StageScratch& s, int l, const Dims& d) const;
  // The stage's input (l = 0) or layer l-1's output, fp32: `input`/res_out itself, or its bf16
  // copy widened into s.storage_x.
  const float* kept_layer_input(const MicrobatchActivations& a, StageScratch& s, int l, const Dims& d) const;
  // The stage's input from upstream (storage() values) kept, and returned in fp32 for layer 0.
  const float* take_input(MicrobatchActivations& a, StageScratch& s, const void* input, const Dims& d) const;
  // A gradient from downstream (storage() values) into fp32 `dx`, and an fp32 input gradient
  // into the storage() buffer sent upstream.
  void take_gradient(float* dx, const void* grad_output, const Dims& d) const;
  void send_gradient(void* grad_input, const float* dx, const Dims& d) const;
  // The embedding's output (fp32 in `x`) kept: rounded and stored in bf16 under BF16.
  void keep_embedding(MicrobatchActivations& a, float* x, const Dims& d) const;
  void embed_backward(float* grads, const MicrobatchActivations& a, const float* dx, const std::int32_t* tokens) const;

  std::function<void()> between_layers_;

  ParamLayout layout_;
  Backend& backend_;
  Stream& stream_;
  TensorParallelComm* tp_ = nullptr;  // null when tp == 1
  bool sequence_parallel_ = false;    // only with tp_
  DType storage_ = DType::F32;
  std::uint32_t bf16_direct_values_ = 0;
  RecomputeOptions recompute_;
  std::vector<LayerRecompute> recompute_plan_;  // one per layer of the range
};

}  // namespace pipelane
