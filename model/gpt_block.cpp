// One transformer layer's sublayers for both families (GptStage's private helpers; the layer
// loops are in gpt_model.cpp). The GPT-2 family keeps the exact op sequence it always had
// (fused c_attn, the GeLU fused with its GEMMs); what a config adds (RMSNorm, RoPE, missing
// biases) are other calls in the same places. The Llama family runs q/k/v and gate/up as separate
// GEMMs on the same normalised input, GQA attention on separate q, k and v, and SwiGLU.
#include <stdexcept>

#include "model/gpt_model.h"

namespace pipelane {

GptStage::Dims GptStage::dims(int B, int T) const {
  const ParamLayout& L = layout_;
  Dims d{};
  d.B = B;
  d.T = T;
  d.N = B * T;
  d.C = config().d_model;
  d.NH = L.local_heads();
  d.KVH = L.local_kv_heads();
  d.hs = config().head_size();
  d.CA = L.local_attn_width();
  d.KV = L.local_kv_width();
  d.CM = L.local_mlp_width();
  d.NC = static_cast<std::size_t>(d.N) * d.C;
  d.n = sequence_rows(B, T);
  d.row0 = sequence_parallel_ ? tp_->rank() * d.n : 0;
  d.nC = static_cast<std::size_t>(d.n) * d.C;
  return d;
}

void GptStage::norm_forward(ActivationOut out, float* mean, float* rstd, const float* inp, const StageWeights& params,
                            std::size_t w, std::size_t b, int N) const {
  const int C = config().d_model;
  if (config().norm == NormKind::LayerNorm)
    backend_.layernorm_forward(out, mean, rstd, inp, params.fp32(w), params.fp32(b), N, C, stream_);
  else
    backend_.rmsnorm_forward(out, rstd, inp, params.fp32(w), N, C, config().norm_eps, stream_);
}

void GptStage::norm_backward(float* dinp, float* grads, const float* dout, ActivationIn inp, const StageWeights& params,
                             std::size_t w, std::size_t b, const float* mean, const float* rstd, int N) const {
  const int C = config().d_model;
  if (config().norm == NormKind::LayerNorm)
    backend_.layernorm_backward(dinp, grads + w, grads + b, dout, inp, params.fp32(w), mean, rstd, N, C, stream_);
  else
    backend_.rmsnorm_backward(dinp, grads + w, dout, inp, params.fp32(w), rstd, N, C, stream_);
}

void GptStage::norm_backward_input(float* dinp, const float* dout, ActivationIn inp, const StageWeights& params,
                                   std::size_t w, const float* mean, const float* rstd, int N) const {
  const int C = config().d_model;
  if (config().norm == NormKind::LayerNorm)
    backend_.layernorm_backward_input(dinp, dout, inp, params.fp32(w), mean, rstd, N, C, stream_);
  else
    backend_.rmsnorm_backward_input(dinp, dout, inp, params.fp32(w), rstd, N, C, stream_);
}

void GptStage::norm_backward_params(float* grads, std::size_t w, std::size_t b, const float* dout, ActivationIn inp,
                                    const float* mean, const float* rstd, int N) const {
  const int C = config().d_model;
  if (config().norm == NormKind::LayerNorm)
    backend_.layernorm_backward_params(grads + w, grads + b, dout, inp, mean, rstd, N, C, stream_);
  else
    backend_.rmsnorm_backward_params(grads + w, dout, inp, rstd, N, C, stream_);
}

void GptStage::rope(float* x, const float* table, int heads, int ld, const Dims& d, bool backward) const {
  if (backward) backend_.rope_backward(x, table, d.B, d.T, 0, heads, d.hs, ld, stream_);
  else backend_.rope_forward(x, table, d.B, d.T, 0, heads, d.hs, ld, stream_);
}

// A row-parallel projection into the residual stream: partial products summed over tp (all rows,
// or under sequence parallelism this rank's rows, at the start of `out`), then the (replicated)
// bias added once. With tp == 1 the bias stays fused into the matmul.
void GptStage::out_projection(float* out, const StageWeights& params, ActivationIn inp, std::size_t w, std::size_t b,
                              int in, const Dims& d) const {
  backend_.matmul_forward(out, inp, params.gemm(w), tp_ ? nullptr : params.fp32_or_null(b), d.N, in, d.C, stream_);
  if (tp_) {
    sum_partials(out, d);
    if (b != ParamLayout::npos) backend_.add_bias(out, params.fp32(b), d.n, d.C, stream_);
  }
}

void GptStage::attention_forward(const StageWeights& params, LayerActivations& h, const LayerOffsets& o,
                                 StageScratch& s, ActivationIn ln, const Dims& d) const {
  const bool rope_on = config().position == PositionKind::Rope;
  if (!config().split_projections()) {
    // Column-parallel c_attn: this rank's q, k and v ([N, 3*CA], laid out [q | k | v]).
    backend_.matmul_forward(h.qkv, ln, params.gemm(o.qkvw), params.fp32_or_null(o.qkvb), d.N, d.C, 3 * d.CA, stream_);
    if (rope_on) {
      rope(h.qkv, s.rope, d.NH, 3 * d.CA, d, false);
      rope(h.qkv + d.CA, s.rope, d.NH, 3 * d.CA, d, false);
    }
    backend_.attention_forward(value_out(h, &LayerActivations::atty), saved_attention(h), h.qkv, d.B, d.T, d.CA, d.NH,
                               stream_);
  } else {
    backend_.matmul_forward(h.q, ln, params.gemm(o.qkvw), params.fp32_or_null(o.qkvb), d.N, d.C, d.CA, stream_);
    backend_.matmul_forward(h.k, ln, params.gemm(o.kw), params.fp32_or_null(o.kb), d.N, d.C, d.KV, stream_);
    backend_.matmul_forward(h.v, ln, params.gemm(o.vw), params.fp32_or_null(o.vb), d.N, d.C, d.KV, stream_);
    if (rope_on) {
      rope(h.q, s.rope, d.NH, d.CA, d, false);
      rope(h.k, s.rope, d.KVH, d.KV, d, false);
    }
    backend_.attention_forward_gqa(value_out(h, &LayerActivations::atty), saved_attention(h), h.q, h.k, h.v, d.B, d.T,
                                   d.NH, d.KVH, d.hs, stream_);
  }
  // q, k and v (after RoPE) kept in bf16 only: now, once the attention has read them in fp32.
  const std::size_t N = static_cast<std::size_t>(d.N);
  keep_value(h, &LayerActivations::qkv, config().split_projections() ? N * (d.CA + 2 * d.KV) : N * 3 * d.CA);
  out_projection(s.proj, params, value_in(h, &LayerActivations::atty), o.attprojw, o.attprojb, d.CA, d);
}

void GptStage::mlp_forward(const StageWeights& params, LayerActivations& h, const LayerOffsets& o, StageScratch& s,
                           ActivationIn ln, const Dims& d) const {
  if (config().mlp == MlpKind::Gelu) {
    backend_.matmul_gelu_forward(h.fch, value_out(h, &LayerActivations::fch_gelu), ln, params.gemm(o.fcw),
                                 params.fp32_or_null(o.fcb), d.N, d.C, d.CM, stream_);
  } else {
    backend_.matmul_forward(h.fch, ln, params.gemm(o.gatew), params.fp32_or_null(o.gateb), d.N, d.C, d.CM, stream_);
    backend_.matmul_forward(h.up, ln, params.gemm(o.fcw), params.fp32_or_null(o.fcb), d.N, d.C, d.CM, stream_);
    const std::size_t n = static_cast<std::size_t>(d.N) * d.CM;
    backend_.swiglu_forward(value_out(h, &LayerActivations::fch_gelu), h.fch, h.up, n, stream_);
  }
  // The GEMMs' outputs kept in bf16 only: now, once the activation has read them in fp32.
  keep_value(h, &LayerActivations::fch, static_cast<std::size_t>(d.N) * d.CM);
  keep_value(h, &LayerActivations::up, static_cast<std::size_t>(d.N) * d.CM);
  out_projection(s.proj, params, value_in(h, &LayerActivations::fch_gelu), o.fcprojw, o.fcprojb, d.CM, d);
}

void GptStage::input_gradient_sum(float* dx, float* tmp, const StageWeights& params,
                                  std::initializer_list<std::size_t> weights, std::initializer_list<const float*> douts,
                                  std::initializer_list<int> widths, const Dims& d) const {
  auto w = weights.begin();
  auto g = douts.begin();
  auto n = widths.begin();
  for (std::size_t i = 0; i < weights.size(); ++i, ++w, ++g, ++n) {
    backend_.matmul_backward_input(i == 0 ? dx : tmp, *g, params.gemm(*w), d.N, d.C, *n, stream_);
    if (i > 0) backend_.add_inplace(dx, tmp, d.NC, stream_);
  }
}

}  // namespace pipelane
