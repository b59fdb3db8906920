// Activation recomputation inside GptStage's passes (model/recompute.h): where each layer's
// buffers are for the forward pass and for backward, and what is rerun before a layer's backward.
// A rerun calls layer_forward, the very function the forward pass calls, on the same inputs: the
// same kernels in the same order give the same bits, so gradients do not change.
#include "model/gpt_model.h"

namespace pipelane {

namespace {
// A full-recompute layer's view: the workspace's forward buffers with the layer's own split
// backward gradients (which live in the microbatch's activations from B to W).
LayerActivations with_gradients_of(LayerActivations view, const LayerActivations& own) {
  view.d_res_out = own.d_res_out;
  view.d_fch = own.d_fch;
  view.d_ln2 = own.d_ln2;
  view.d_res_attn = own.d_res_attn;
  view.d_qkv = own.d_qkv;
  view.d_ln1 = own.d_ln1;
  view.d_up = own.d_up;
  return view;
}
// bf16 storage: a layer's fp32 workspace with what the microbatch keeps in fp32 itself (the norms'
// statistics, a non-probability attention state, the split backward's gradients).
LayerActivations with_fp32_state_of(LayerActivations workspace, const LayerActivations& own) {
  workspace.ln1_mean = own.ln1_mean;
  workspace.ln1_rstd = own.ln1_rstd;
  workspace.ln2_mean = own.ln2_mean;
  workspace.ln2_rstd = own.ln2_rstd;
  if (own.att) workspace.att = own.att;
  return with_gradients_of(workspace, own);
}
}  // namespace

void GptStage::layer_forward(const StageWeights& params, LayerActivations& h, const LayerOffsets& o, StageScratch& s,
                             const float* x, const Dims& d) const {
  norm_forward(value_out(h, &LayerActivations::ln1), h.ln1_mean, h.ln1_rstd, x, params, o.ln1w, o.ln1b, d.n);
  attention_forward(params, h, o, s, gather_rows(value_in(h, &LayerActivations::ln1), s.gathered, d), d);
  backend_.add(h.res_attn, x, s.proj, d.nC, stream_);
  // bf16 storage keeping it only in bf16 (bf16_norm_inputs): now, before res_out takes its place.
  keep_value(h, &LayerActivations::res_attn, d.nC);
  norm_forward(value_out(h, &LayerActivations::ln2), h.ln2_mean, h.ln2_rstd, h.res_attn, params, o.ln2w, o.ln2b, d.n);
  mlp_forward(params, h, o, s, gather_rows(value_in(h, &LayerActivations::ln2), s.gathered, d), d);
  backend_.add(h.res_out, h.res_attn, s.proj, d.nC, stream_);
}

// In the forward pass a selective layer writes its attention-core state into the workspace (it
// is dropped), and a full-recompute layer everything but the output that ends its group.
LayerActivations GptStage::forward_view(MicrobatchActivations& a, StageScratch& s, int l) const {
  const LayerRecompute& r = recompute_plan_[l];
  LayerActivations h = a.layers[l];
  const std::size_t att = layer_value_index(&LayerActivations::att);
  if (r.keeps == LayerKeeps::AllButAttentionCore) h.att = s.recompute_att, h.bf16[att] = s.recompute_att_bf16;
  if (r.keeps != LayerKeeps::Output) {
    if (!bf16_storage()) return h;
    const LayerActivations none{};  // no workspace: every value is kept in bf16 by its ops
    LayerActivations w = with_fp32_state_of(s.storage_layers.empty() ? none : s.storage_layers.front(), h);
    // The output goes where the input came from: layer_forward reads x (the stage's input, or the
    // previous layer's output: s.storage_x either way) only before it writes res_out.
    w.res_out = s.storage_x;
    // Straight into (and out of) bf16: the kept buffers, or for a selective layer's probabilities
    // its scratch.
    const std::uint32_t direct = bf16_direct_values();
    for (std::size_t i = 0; i < kLayerValueCount; ++i) {
      if (!(direct >> i & 1u)) continue;
      w.*kLayerValues[i] = nullptr;
      w.bf16[i] = i == att && r.keeps == LayerKeeps::AllButAttentionCore ? s.recompute_att_bf16 : a.stored[l].values[i];
    }
    // The values kept in bf16 only that forward still reads in fp32 after making them: their fp32
    // values in scratch that backward fills only later (bf16_norm_inputs, bf16_gemm_outputs).
    // res_attn goes to s.storage_x, where res_out then overwrites it in place (the add reads it
    // first).
    if (w.bf16[layer_value_index(&LayerActivations::res_attn)]) w.res_attn = s.storage_x;
    if (w.bf16[layer_value_index(&LayerActivations::qkv)]) {
      const Dims d = dims(a.B, a.T);
      const std::size_t N = static_cast<std::size_t>(d.N);
      w.qkv = s.dqkv;
      if (config().split_projections()) w.q = s.dqkv, w.k = w.q + N * d.CA, w.v = w.k + N * d.KV;
    }
    if (w.bf16[layer_value_index(&LayerActivations::fch)]) {
      const bool swiglu = config().mlp == MlpKind::SwiGlu;
      w.fch = swiglu ? s.dgate : s.d4c;
      if (swiglu) w.up = s.dup;
    }
    return w;
  }
  LayerActivations w = s.recompute_layers[l - r.group_first];
  if (r.ends_group(l) && !bf16_storage()) w.res_out = h.res_out;  // bf16: store_layer keeps it
  return w;
}

// In backward a full-recompute layer's activations are the workspace's, rerun by
// recompute_group (also its output: the kept one may still be read by a send).
LayerActivations GptStage::backward_view(MicrobatchActivations& a, StageScratch& s, int l) const {
  const LayerRecompute& r = recompute_plan_[l];
  if (r.keeps != LayerKeeps::Output) {
    LayerActivations h = forward_view(a, s, l);
    // Backward reads what is kept in bf16 only there (forward's fp32 scratch is overwritten by then).
    for (std::size_t i = 0; i < kLayerValueCount; ++i)
      if (h.bf16[i]) h.*kLayerValues[i] = nullptr;
    if (h.bf16[layer_value_index(&LayerActivations::qkv)]) h.q = h.k = h.v = nullptr;
    return h;
  }
  return with_gradients_of(s.recompute_layers[l - r.group_first], a.layers[l]);
}

// The input of layer l: the stage's input or the previous layer's output, which every layer
// keeps unless it is inside a full-recompute group (then the workspace holds it after the rerun).
const float* GptStage::backward_input_of(const MicrobatchActivations& a, StageScratch& s, int l, const Dims& d) const {
  const LayerRecompute& r = recompute_plan_[l];
  if (r.keeps == LayerKeeps::Output && l > r.group_first) return s.recompute_layers[l - 1 - r.group_first].res_out;
  return kept_layer_input(a, s, l, d);
}

// Layers [group_first, l] of l's group again, from the group's kept input into the workspace.
void GptStage::recompute_group(const StageWeights& params, MicrobatchActivations& a, StageScratch& s, int l,
                               const Dims& d) const {
  const int first = recompute_plan_[l].group_first;
  const float* x = kept_layer_input(a, s, first, d);
  for (int k = first; k <= l; ++k) {
    LayerActivations& h = s.recompute_layers[k - first];
    layer_forward(params, h, layout_.layers[k], s, x, d);
    round_layer(h, d);
    x = h.res_out;
    layer_done();
  }
}

// The attention core's saved state (h.att, the workspace's) from q, k and v, which the layer
// kept; the output it also produces equals the kept atty and goes to a throwaway buffer.
void GptStage::recompute_attention_core(const LayerActivations& h, StageScratch& s, const Dims& d) const {
  if (!config().split_projections()) {
    backend_.attention_forward(s.recompute_atty, saved_attention(h), value_in(h, &LayerActivations::qkv), d.B, d.T,
                               d.CA, d.NH, stream_);
  } else {
    const QkvIn x = split_qkv_in(h, d.N, d.CA, d.KV);
    backend_.attention_forward_gqa(s.recompute_atty, saved_attention(h), x.q, x.k, x.v, d.B, d.T, d.NH, d.KVH, d.hs,
                                   stream_);
  }
  if (bf16_storage() && !h.bf16[layer_value_index(&LayerActivations::att)]) {  // what none widens from storage
    const std::size_t probabilities = layer_value_sizes(d)[layer_value_index(&LayerActivations::att)];
    if (probabilities != 0) backend_.round_to_bf16(h.att, probabilities, stream_);
  }
}

// The weight half (W) needs no attention-core state, but every other forward activation: a full
// group is rerun for W too when the backward is split (B's rerun is gone by then).
void GptStage::before_layer_backward(const StageWeights& params, MicrobatchActivations& a, StageScratch& s, int l,
                                     const Dims& d, bool weight_half) const {
  const LayerRecompute& r = recompute_plan_[l];
  if (r.keeps != LayerKeeps::Output) load_layer(a, s, l, d);
  if (r.keeps == LayerKeeps::Output && r.ends_group(l)) recompute_group(params, a, s, l, d);
  if (r.keeps == LayerKeeps::AllButAttentionCore && !weight_half)
    recompute_attention_core(backward_view(a, s, l), s, d);
}

}  // namespace pipelane
