// The backward of one layer's sublayers (gpt_block.cpp has the forward): whole, or split into
// the input-gradient half (B) and the weight-gradient half (W) of zero-bubble schedules, which
// together make the same calls on the same values (bit-identical gradients). The GPT-2 family's
// calls are those it always made; see gpt_block.cpp.
#include "model/gpt_model.h"

namespace pipelane {

namespace {
float* at(float* base, std::size_t offset) { return offset == ParamLayout::npos ? nullptr : base + offset; }

// The Llama family's dq, dk, dv: one [N, CA + 2 KV] buffer.
struct SplitQkv {
  float *q, *k, *v;
};
SplitQkv split_qkv(float* base, int N, int CA, int KV) {
  const std::size_t n = static_cast<std::size_t>(N);
  return {base, base + n * CA, base + n * CA + n * KV};
}

// The weight (and bias) gradients (+=) of q_proj, k_proj and v_proj from their output gradients
// g and their input ln1, in that order: whole backward and W half make the same calls.
void split_qkv_weight_gradients(Backend& backend, Stream& stream, const StageWeights& params, float* grads,
                                const SplitQkv& g, ActivationIn ln1, const LayerOffsets& o, int N, int C, int CA,
                                int KV) {
  backend.matmul_backward(nullptr, grads + o.qkvw, at(grads, o.qkvb), g.q, ln1, params.gemm(o.qkvw), N, C, CA, stream);
  backend.matmul_backward(nullptr, grads + o.kw, at(grads, o.kb), g.k, ln1, params.gemm(o.kw), N, C, KV, stream);
  backend.matmul_backward(nullptr, grads + o.vw, at(grads, o.vb), g.v, ln1, params.gemm(o.vw), N, C, KV, stream);
}
}  // namespace

// MLP: s.dres (of its output) -> s.dtmp (of ln2, summed over tp); every MLP weight's gradient.
// Under sequence parallelism s.dres and h.ln2 are this rank's rows: gathered first.
const float* GptStage::mlp_backward(const StageWeights& params, float* grads, const LayerActivations& h,
                                    const LayerOffsets& o, StageScratch& s, const Dims& d) const {
  const float* dout = gather_rows(s.dres, s.dres_full, d);
  const ActivationIn ln2 = gather_rows(value_in(h, &LayerActivations::ln2), s.gathered, d);
  const ActivationIn fch_gelu = value_in(h, &LayerActivations::fch_gelu);
  const ActivationIn fch = value_in(h, &LayerActivations::fch), up = value_in(h, &LayerActivations::up);
  if (config().mlp == MlpKind::Gelu) {
    backend_.matmul_backward(nullptr, grads + o.fcprojw, at(grads, o.fcprojb), dout, fch_gelu, params.gemm(o.fcprojw),
                             d.N, d.CM, d.C, stream_);
    backend_.matmul_backward_input_dgelu(s.d4c, dout, params.gemm(o.fcprojw), fch, d.N, d.CM, d.C, stream_);
    backend_.matmul_backward(s.dtmp, grads + o.fcw, at(grads, o.fcb), s.d4c, ln2, params.gemm(o.fcw), d.N, d.C, d.CM,
                             stream_);
  } else {
    backend_.matmul_backward(s.d4c, grads + o.fcprojw, at(grads, o.fcprojb), dout, fch_gelu, params.gemm(o.fcprojw),
                             d.N, d.CM, d.C, stream_);
    backend_.swiglu_backward(s.dgate, s.dup, s.d4c, fch, up, static_cast<std::size_t>(d.N) * d.CM, stream_);
    backend_.matmul_backward(nullptr, grads + o.gatew, at(grads, o.gateb), s.dgate, ln2, params.gemm(o.gatew), d.N, d.C,
                             d.CM, stream_);
    backend_.matmul_backward(nullptr, grads + o.fcw, at(grads, o.fcb), s.dup, ln2, params.gemm(o.fcw), d.N, d.C, d.CM,
                             stream_);
    input_gradient_sum(s.dtmp, s.dtmp2, params, {o.gatew, o.fcw}, {s.dgate, s.dup}, {d.CM, d.CM}, d);
  }
  sum_partials(s.dtmp, d);  // backward of the column-parallel input projection(s) ("f")
  return s.dtmp;
}

// Attention: s.dres (of its output) -> s.dtmp (of ln1, summed over tp); every attention weight's
// gradient.
const float* GptStage::attention_backward(const StageWeights& params, float* grads, const LayerActivations& h,
                                          const LayerOffsets& o, StageScratch& s, const Dims& d) const {
  const bool rope_on = config().position == PositionKind::Rope;
  const float* dout = gather_rows(s.dres, s.dres_full, d);
  const ActivationIn atty = value_in(h, &LayerActivations::atty);
  const ActivationIn ln1 = gather_rows(value_in(h, &LayerActivations::ln1), s.gathered, d);
  backend_.matmul_backward(s.dtmp, grads + o.attprojw, at(grads, o.attprojb), dout, atty, params.gemm(o.attprojw),
                           d.N, d.CA, d.C, stream_);  // s.dtmp holds [N, CA] here
  if (!config().split_projections()) {
    backend_.attention_backward(s.dqkv, s.dtmp, value_in(h, &LayerActivations::qkv), atty, saved_attention(h), d.B,
                                d.T, d.CA, d.NH, stream_);
    if (rope_on) {
      rope(s.dqkv, s.rope, d.NH, 3 * d.CA, d, true);
      rope(s.dqkv + d.CA, s.rope, d.NH, 3 * d.CA, d, true);
    }
    backend_.matmul_backward(s.dtmp, grads + o.qkvw, at(grads, o.qkvb), s.dqkv, ln1, params.gemm(o.qkvw), d.N, d.C,
                             3 * d.CA, stream_);
  } else {
    const SplitQkv g = split_qkv(s.dqkv, d.N, d.CA, d.KV);
    const QkvIn x = split_qkv_in(h, d.N, d.CA, d.KV);
    backend_.attention_backward_gqa(g.q, g.k, g.v, s.dtmp, x.q, x.k, x.v, atty, saved_attention(h), d.B, d.T, d.NH,
                                    d.KVH, d.hs, stream_);
    if (rope_on) {
      rope(g.q, s.rope, d.NH, d.CA, d, true);
      rope(g.k, s.rope, d.KVH, d.KV, d, true);
    }
    split_qkv_weight_gradients(backend_, stream_, params, grads, g, ln1, o, d.N, d.C, d.CA, d.KV);
    input_gradient_sum(s.dtmp, s.dtmp2, params, {o.qkvw, o.kw, o.vw}, {g.q, g.k, g.v}, {d.CA, d.KV, d.KV}, d);
  }
  sum_partials(s.dtmp, d);  // backward of the column-parallel q/k/v projection(s) ("f")
  return s.dtmp;
}

// B of the MLP: h.d_res_out -> h.d_ln2 (summed over tp), keeping h.d_fch (and h.d_up) for W.
// Under sequence parallelism the partial [N,C] gradient goes through s.dtmp (h.d_ln2 holds only
// this rank's rows): reduce-scattered there, then copied.
void GptStage::mlp_backward_input(const StageWeights& params, LayerActivations& h, const LayerOffsets& o,
                                  StageScratch& s, const Dims& d) const {
  const float* dout = gather_rows(h.d_res_out, s.dres_full, d);
  float* partial = sequence_parallel_ ? s.dtmp : h.d_ln2;
  const ActivationIn fch = value_in(h, &LayerActivations::fch), up = value_in(h, &LayerActivations::up);
  if (config().mlp == MlpKind::Gelu) {
    backend_.matmul_backward_input_dgelu(h.d_fch, dout, params.gemm(o.fcprojw), fch, d.N, d.CM, d.C, stream_);
    backend_.matmul_backward_input(partial, h.d_fch, params.gemm(o.fcw), d.N, d.C, d.CM, stream_);
  } else {
    backend_.matmul_backward_input(s.d4c, dout, params.gemm(o.fcprojw), d.N, d.CM, d.C, stream_);
    backend_.swiglu_backward(h.d_fch, h.d_up, s.d4c, fch, up, static_cast<std::size_t>(d.N) * d.CM, stream_);
    input_gradient_sum(partial, s.dtmp2, params, {o.gatew, o.fcw}, {h.d_fch, h.d_up}, {d.CM, d.CM}, d);
  }
  sum_partials(partial, d);
  if (partial != h.d_ln2) backend_.copy(h.d_ln2, partial, d.nC * sizeof(float), stream_);
}

// B of the attention: h.d_res_attn -> h.d_ln1 (summed over tp), keeping h.d_qkv for W.
void GptStage::attention_backward_input(const StageWeights& params, LayerActivations& h, const LayerOffsets& o,
                                        StageScratch& s, const Dims& d) const {
  const bool rope_on = config().position == PositionKind::Rope;
  const float* dout = gather_rows(h.d_res_attn, s.dres_full, d);
  const ActivationIn atty = value_in(h, &LayerActivations::atty);
  // s.dtmp holds the attention output's gradient until attention_backward has read it, then
  // (sequence parallelism) the partial input gradient.
  float* partial = sequence_parallel_ ? s.dtmp : h.d_ln1;
  backend_.matmul_backward_input(s.dtmp, dout, params.gemm(o.attprojw), d.N, d.CA, d.C, stream_);  // [N, CA]
  if (!config().split_projections()) {
    backend_.attention_backward(h.d_qkv, s.dtmp, value_in(h, &LayerActivations::qkv), atty, saved_attention(h), d.B,
                                d.T, d.CA, d.NH, stream_);
    if (rope_on) {
      rope(h.d_qkv, s.rope, d.NH, 3 * d.CA, d, true);
      rope(h.d_qkv + d.CA, s.rope, d.NH, 3 * d.CA, d, true);
    }
    backend_.matmul_backward_input(partial, h.d_qkv, params.gemm(o.qkvw), d.N, d.C, 3 * d.CA, stream_);
  } else {
    const SplitQkv g = split_qkv(h.d_qkv, d.N, d.CA, d.KV);
    const QkvIn x = split_qkv_in(h, d.N, d.CA, d.KV);
    backend_.attention_backward_gqa(g.q, g.k, g.v, s.dtmp, x.q, x.k, x.v, atty, saved_attention(h), d.B, d.T, d.NH,
                                    d.KVH, d.hs, stream_);
    if (rope_on) {
      rope(g.q, s.rope, d.NH, d.CA, d, true);
      rope(g.k, s.rope, d.KVH, d.KV, d, true);
    }
    input_gradient_sum(partial, s.dtmp2, params, {o.qkvw, o.kw, o.vw}, {g.q, g.k, g.v}, {d.CA, d.KV, d.KV}, d);
  }
  sum_partials(partial, d);
  if (partial != h.d_ln1) backend_.copy(h.d_ln1, partial, d.nC * sizeof(float), stream_);
}

// The W halves. Under sequence parallelism the residual gradient and the norm's output kept for
// them are this rank's rows: W gathers them again (its only communication).
void GptStage::mlp_backward_weight(const StageWeights& params, float* grads, const LayerActivations& h,
                                   const LayerOffsets& o, StageScratch& s, const Dims& d) const {
  const float* dout = gather_rows(h.d_res_out, s.dres_full, d);
  const ActivationIn ln2 = gather_rows(value_in(h, &LayerActivations::ln2), s.gathered, d);
  const ActivationIn fch_gelu = value_in(h, &LayerActivations::fch_gelu);
  backend_.matmul_backward(nullptr, grads + o.fcprojw, at(grads, o.fcprojb), dout, fch_gelu, params.gemm(o.fcprojw),
                           d.N, d.CM, d.C, stream_);
  if (config().mlp == MlpKind::SwiGlu)
    backend_.matmul_backward(nullptr, grads + o.gatew, at(grads, o.gateb), h.d_fch, ln2, params.gemm(o.gatew), d.N, d.C,
                             d.CM, stream_);
  backend_.matmul_backward(nullptr, grads + o.fcw, at(grads, o.fcb), config().mlp == MlpKind::SwiGlu ? h.d_up : h.d_fch,
                           ln2, params.gemm(o.fcw), d.N, d.C, d.CM, stream_);
}

void GptStage::attention_backward_weight(const StageWeights& params, float* grads, const LayerActivations& h,
                                         const LayerOffsets& o, StageScratch& s, const Dims& d) const {
  const float* dout = gather_rows(h.d_res_attn, s.dres_full, d);
  const ActivationIn ln1 = gather_rows(value_in(h, &LayerActivations::ln1), s.gathered, d);
  const ActivationIn atty = value_in(h, &LayerActivations::atty);
  backend_.matmul_backward(nullptr, grads + o.attprojw, at(grads, o.attprojb), dout, atty, params.gemm(o.attprojw),
                           d.N, d.CA, d.C, stream_);
  if (!config().split_projections()) {
    backend_.matmul_backward(nullptr, grads + o.qkvw, at(grads, o.qkvb), h.d_qkv, ln1, params.gemm(o.qkvw), d.N, d.C,
                             3 * d.CA, stream_);
    return;
  }
  split_qkv_weight_gradients(backend_, stream_, params, grads, split_qkv(h.d_qkv, d.N, d.CA, d.KV), ln1, o, d.N, d.C,
                             d.CA, d.KV);
}

}  // namespace pipelane
