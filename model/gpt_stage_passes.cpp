// GptStage's passes over its layers: forward (embedding, layers, final norm, head and loss),
// backward, and the zero-bubble halves backward_input (B) / backward_weight (W). The sublayers
// are gpt_block.cpp's; this file walks the layers and the residual stream.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "model/gpt_model.h"

namespace pipelane {

// The first stage's token (and learned position) embedding of `tokens` into `out` [n,C].
void GptStage::embed(const StageWeights& params, float* out, const Dims& d, StageScratch& s,
                     const std::int32_t* tokens) const {
  const ParamLayout& L = layout_;
  const bool learned = config().has_learned_positions();
  if (sequence_parallel_) {
    // Every row's partial lookup, reduce-scattered: this rank's rows of the sum, then their
    // positions (row r is position r % T) added a run of consecutive positions at a time, the same
    // float adds add_positions makes.
    backend_.embedding_lookup_local(s.proj, tokens, params.fp32(L.wte), d.N, d.C, L.vocab_begin(), L.vocab_local(),
                                    stream_);
    sum_partials(s.proj, d);
    backend_.copy(out, s.proj, d.nC * sizeof(float), stream_);
    for (int row = d.row0; learned && row < d.row0 + d.n;) {
      const int t = row % d.T, run = std::min(d.T - t, d.row0 + d.n - row);
      backend_.add_inplace(out + static_cast<std::size_t>(row - d.row0) * d.C,
                           params.fp32(L.wpe) + static_cast<std::size_t>(t) * d.C, static_cast<std::size_t>(run) * d.C,
                           stream_);
      row += run;
    }
  } else if (tp_) {
    backend_.embedding_lookup_local(out, tokens, params.fp32(L.wte), d.N, d.C, L.vocab_begin(), L.vocab_local(),
                                    stream_);
    reduce_sum(out, d.NC);
    if (learned) backend_.add_positions(out, params.fp32(L.wpe), d.B, d.T, d.C, stream_);
  } else if (learned) {
    backend_.embedding_forward(out, tokens, params.fp32(L.wte), params.fp32(L.wpe), d.B, d.T, d.C, stream_);
  } else {
    backend_.embedding_lookup_local(out, tokens, params.fp32(L.wte), d.N, d.C, 0, L.vocab_local(), stream_);
  }
}

// Its backward from `dx`, the gradient of a.input.
void GptStage::embed_backward(float* grads, const MicrobatchActivations& a, const float* dx,
                              const std::int32_t* tokens) const {
  const ParamLayout& L = layout_;
  const Dims d = dims(a.B, a.T);
  const int v0 = tp_ ? L.vocab_begin() : 0;
  if (!config().has_learned_positions())
    backend_.embedding_backward_tokens(grads + L.wte, dx, tokens, d.N, d.C, v0, L.vocab_local(), stream_);
  else if (tp_)
    backend_.embedding_backward_local(grads + L.wte, grads + L.wpe, dx, tokens, d.B, d.T, d.C, L.vocab_begin(),
                                      L.vocab_local(), stream_);
  else
    backend_.embedding_backward(grads + L.wte, grads + L.wpe, dx, tokens, d.B, d.T, d.C, stream_);
}

double GptStage::forward(const StageWeights& params, float* grads, MicrobatchActivations& a, StageScratch& s,
                         const std::int32_t* tokens, const void* input, const std::int32_t* targets,
                         float loss_scale) const {
  const GptConfig& cfg = config();
  const ParamLayout& L = layout_;
  const Dims d = dims(a.B, a.T);
  if (a.T > cfg.max_seq_len) throw std::invalid_argument("GptStage::forward: T exceeds max_seq_len");
  if (a.weight_grad_pending)
    throw std::logic_error("GptStage::forward: these activations still wait for their backward_weight");

  const float* x = nullptr;
  if (range().has_embedding) {
    float* e = bf16_storage() ? s.storage_x : a.input;
    embed(params, e, d, s, tokens);
    keep_embedding(a, e, d);
    x = e;
  } else {
    x = take_input(a, s, input, d);
  }
  for (int l = 0; l < static_cast<int>(a.layers.size()); ++l) {
    LayerActivations h = forward_view(a, s, l);
    layer_forward(params, h, L.layers[l], s, x, d);
    store_layer(a, h, l, d);
    x = h.res_out;
    layer_done();
  }
  if (!range().has_head) return 0.0;
  if (sequence_parallel_) {  // the final norm on this rank's rows; the head reads every row
    norm_forward(s.proj, a.lnf_mean, a.lnf_rstd, x, params, L.lnfw, L.lnfb, d.n);
    tp_->all_gather(s.proj, a.lnf, d.nC);
  } else {
    norm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, params, L.lnfw, L.lnfb, d.N);
  }
  a.head_grad_ready = grads != nullptr;
  if (tp_) {
    TensorParallelComm* comm = tp_;
    // Sequence parallelism: the head's input gradient (every row, into s.dres_full) is left
    // partial - a backend sums it over the group through reduce.sum in chunks of rows of dx,
    // which skips them - and reduce-scattered once after the head, so each rank receives only its
    // rows (Megatron's reduce-scatter: half the bytes of the all-reduce; the same rank-order sums).
    float* dx = grads ? (sequence_parallel_ ? s.dres_full : a.dlnf) : nullptr;
    const std::uintptr_t partial_begin = sequence_parallel_ && dx ? reinterpret_cast<std::uintptr_t>(dx) : 0;
    const std::uintptr_t partial_end = partial_begin ? partial_begin + d.NC * sizeof(float) : 0;
    const GroupReduce reduce{[comm, partial_begin, partial_end](float* p, std::size_t n) {
                               const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(p);
                               if (at >= partial_begin && at < partial_end) return;  // dx: after the head
                               comm->all_reduce_sum(p, n);
                             },
                             [comm](float* p, std::size_t n) { comm->all_reduce_max(p, n); }};
    const double loss = backend_.lm_head_cross_entropy_vocab_parallel(
        a.losses, dx, grads ? grads + L.head : nullptr, a.lnf, params.gemm(L.head), targets, d.N, d.C, cfg.vocab_size,
        L.vocab_begin(), L.vocab_local(), loss_scale, s.logits, reduce, stream_);
    if (partial_begin) {
      tp_->reduce_scatter_sum(dx, d.nC);
      backend_.copy(a.dlnf, dx, d.nC * sizeof(float), stream_);
    }
    return loss;
  }
  return backend_.lm_head_cross_entropy(a.losses, grads ? a.dlnf : nullptr, grads ? grads + L.head : nullptr,
                                        a.lnf, params.gemm(L.head), targets, d.N, d.C, cfg.vocab_size,
                                        cfg.padded_vocab(), loss_scale, s.logits, stream_);
}

// Under tensor parallelism s.dres (the residual stream's gradient) is identical on every rank: it
// starts from the all-reduced head gradient (or the same grad_output), and every update to it is
// a replicated op on all-reduced inputs. That is why the replicated tensors' gradients (norms,
// the output projections' biases, wpe) come out identical on every rank without a reduce.
// With sequence parallelism s.dres holds this rank's rows: the output projections' biases and wpe
// are still computed from every row (gathered), the norms' from this rank's rows only
// (reduce_sequence_parallel_gradients sums them).
void GptStage::backward(const StageWeights& params, float* grads, MicrobatchActivations& a, StageScratch& s,
                        const std::int32_t* tokens, const void* grad_output, void* grad_input) const {
  const ParamLayout& L = layout_;
  const Dims d = dims(a.B, a.T);
  const int nl = static_cast<int>(a.layers.size());
  if (range().has_head) {
    if (!a.head_grad_ready) throw std::logic_error("GptStage::backward: forward ran without gradients (grads == null)");
    a.head_grad_ready = false;
    backend_.memset_zero(s.dres, d.nC * sizeof(float), stream_);
    norm_backward(s.dres, grads, a.dlnf, kept_layer_input(a, s, nl, d), params, L.lnfw, L.lnfb, a.lnf_mean,
                  a.lnf_rstd, d.n);
  } else {
    take_gradient(s.dres, grad_output, d);
  }
  for (int l = nl - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layers[l];
    before_layer_backward(params, a, s, l, d, false);
    const LayerActivations h = backward_view(a, s, l);
    const float* x = backward_input_of(a, s, l, d);
    const float* dln2 = mlp_backward(params, grads, h, o, s, d);  // res_out = res_attn + mlp(norm2(res_attn))
    norm_backward(s.dres, grads, dln2, value_in(h, &LayerActivations::res_attn), params, o.ln2w, o.ln2b, h.ln2_mean,
                  h.ln2_rstd, d.n);
    const float* dln1 = attention_backward(params, grads, h, o, s, d);  // res_attn = x + attention(norm1(x))
    norm_backward(s.dres, grads, dln1, x, params, o.ln1w, o.ln1b, h.ln1_mean, h.ln1_rstd, d.n);
    layer_done();
  }
  if (range().has_embedding) embed_backward(grads, a, gather_rows(s.dres, s.dres_full, d), tokens);
  else send_gradient(grad_input, s.dres, d);
}

// backward() split for zero-bubble schedules. backward_input runs backward()'s input-gradient ops
// in the same order on the same values, but keeps every gradient that a weight gradient consumes
// in acts (the layer's d_* buffers) instead of the shared scratch: the residual gradient is
// accumulated in d_res_out[l] -> (copy) d_res_attn[l] -> (copy) d_res_out[l-1] rather than in
// place in s.dres, which gives the same bits. backward_weight then makes exactly backward()'s
// weight-gradient calls on those buffers; each gradient tensor receives one += per microbatch
// either way, so the results are bit-identical.
void GptStage::backward_input(const StageWeights& params, float* grads, MicrobatchActivations& a, StageScratch& s,
                              const std::int32_t* tokens, const void* grad_output, void* grad_input) const {
  (void)grads;   // all of this stage's parameter gradients are W's (or, for the head, forward's)
  (void)tokens;  // only the embedding's backward (W) needs them
  if (!a.split_backward)
    throw std::logic_error("GptStage::backward_input: activations were allocated without split_backward");
  if (a.weight_grad_pending)
    throw std::logic_error(
        "GptStage::backward_input: the previous backward_input on these activations still waits for its "
        "backward_weight");
  const ParamLayout& L = layout_;
  const Dims d = dims(a.B, a.T);
  const int nl = static_cast<int>(a.layers.size());
  // Where the gradient of layer l's input goes: layer l-1's d_res_out, or for l == 0 the stage's
  // input gradient (kept for the embedding's W on the first stage, else the caller's grad_input).
  // (fp32: under bf16 storage the stage's input gradient is made in s.storage_dx and sent in bf16.)
  float* const stage_input_grad = range().has_embedding ? a.d_input
                                  : bf16_storage()      ? s.storage_dx
                                                        : static_cast<float*>(grad_input);
  auto grad_of_layer_input = [&](int l) -> float* { return l > 0 ? a.layers[l - 1].d_res_out : stage_input_grad; };
  float* dtop = grad_of_layer_input(nl);  // gradient of the stage's output
  if (range().has_head) {
    if (!a.head_grad_ready)
      throw std::logic_error("GptStage::backward_input: forward ran without gradients (grads == null)");
    a.head_grad_ready = false;
    backend_.memset_zero(dtop, d.nC * sizeof(float), stream_);
    norm_backward_input(dtop, a.dlnf, kept_layer_input(a, s, nl, d), params, L.lnfw, a.lnf_mean, a.lnf_rstd, d.n);
  } else if (dtop != grad_output) {
    take_gradient(dtop, grad_output, d);
  }
  for (int l = nl - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layers[l];
    before_layer_backward(params, a, s, l, d, false);
    LayerActivations h = backward_view(a, s, l);
    const float* x = backward_input_of(a, s, l, d);
    mlp_backward_input(params, h, o, s, d);
    backend_.copy(h.d_res_attn, h.d_res_out, d.nC * sizeof(float), stream_);
    norm_backward_input(h.d_res_attn, h.d_ln2, value_in(h, &LayerActivations::res_attn), params, o.ln2w, h.ln2_mean,
                        h.ln2_rstd, d.n);
    attention_backward_input(params, h, o, s, d);
    float* dx = grad_of_layer_input(l);
    backend_.copy(dx, h.d_res_attn, d.nC * sizeof(float), stream_);
    norm_backward_input(dx, h.d_ln1, x, params, o.ln1w, h.ln1_mean, h.ln1_rstd, d.n);
    layer_done();
  }
  if (!range().has_embedding && stage_input_grad != grad_input) send_gradient(grad_input, stage_input_grad, d);
  a.weight_grad_pending = true;
}

void GptStage::backward_weight(const StageWeights& params, float* grads, MicrobatchActivations& a, StageScratch& s,
                               const std::int32_t* tokens) const {
  if (!a.split_backward)
    throw std::logic_error("GptStage::backward_weight: activations were allocated without split_backward");
  if (!a.weight_grad_pending)
    throw std::logic_error("GptStage::backward_weight: no backward_input ran on these activations");
  const ParamLayout& L = layout_;
  const Dims d = dims(a.B, a.T);
  if (range().has_head)
    norm_backward_params(grads, L.lnfw, L.lnfb, a.dlnf, kept_layer_input(a, s, static_cast<int>(a.layers.size()), d),
                         a.lnf_mean, a.lnf_rstd, d.n);
  for (int l = static_cast<int>(a.layers.size()) - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layers[l];
    before_layer_backward(params, a, s, l, d, true);
    const LayerActivations h = backward_view(a, s, l);
    const float* x = backward_input_of(a, s, l, d);
    mlp_backward_weight(params, grads, h, o, s, d);
    norm_backward_params(grads, o.ln2w, o.ln2b, h.d_ln2, value_in(h, &LayerActivations::res_attn), h.ln2_mean,
                         h.ln2_rstd, d.n);
    attention_backward_weight(params, grads, h, o, s, d);
    norm_backward_params(grads, o.ln1w, o.ln1b, h.d_ln1, x, h.ln1_mean, h.ln1_rstd, d.n);
    layer_done();
  }
  if (range().has_embedding) embed_backward(grads, a, gather_rows(a.d_input, s.dres_full, d), tokens);
  a.weight_grad_pending = false;
}

}  // namespace pipelane
