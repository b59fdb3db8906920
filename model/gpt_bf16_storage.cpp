// bf16 storage inside GptStage's passes (GptStage's `storage` = BF16; Megatron-LM's --bf16 beside
// autocast's bf16 GEMM operands). What it means here:
//   - A layer computes in fp32, with the backend's bf16 compute: every GEMM rounds its operands to
//     bf16. The values the layer keeps (kLayerValues: the norms' outputs, q/k/v, the attention's
//     probabilities and output, the MLP's GEMM outputs and activation, the residual stream) are
//     kept in bf16: half the bytes of every in-flight microbatch. The norms' statistics, a
//     backend's non-probability attention state (cuDNN's softmax statistics: rounding a
//     log-sum-exp to 8 bits would move every probability) and gradients stay fp32, as in Megatron.
//   - The residual stream between layers is bf16: a layer's output is rounded before the next
//     layer (and the head) reads it, so what backward widens from storage is what forward read.
//     Inside a layer, forward reads its fp32 intermediates; backward reads their bf16 copies. For
//     the GEMMs that is the same value (they round their operands anyway); the element-wise
//     backwards (norms, GeLU/SwiGLU, softmax) see their input rounded, as under Megatron's bf16.
//   - Recomputation keeps results bit-identical to recompute = none under bf16 storage too: a
//     rerun layer's values are rounded as storage would have rounded them (round_layer), and the
//     selective rerun's probabilities likewise (they equal forward's: the score GEMM's operands
//     are bf16-rounded in both).
//   - Where the backend takes them so, the ops write and read the kept values as bf16 buffers
//     themselves (bf16_direct_values), rounded as a cast would round them: the same bits. Values
//     forward reads again in fp32 after making them (q/k/v after RoPE, the MLP's GEMM outputs,
//     res_attn) are made in fp32 scratch that backward fills only later, and cast to their bf16
//     buffer once forward is done with them (keep_value); res_attn and res_out are made in place
//     in s.storage_x, the layer's input. Selective recomputation's rerun writes the probabilities
//     into bf16 scratch, and a full rerun's workspace keeps them in bf16 too.
//   - Any other value (the norms' outputs under sequence parallelism, whose rows are all-gathered
//     in fp32; what cuDNN's attention does not take in bf16) goes through a one-layer fp32
//     workspace (StageScratch::storage_layers): stored after the layer (store_layer), widened back
//     before its backward (load_layer).
//   - The stage's input, output and their gradients are bf16 buffers: stage-to-stage transfers
//     carry half the bytes. The gradient is rounded once, when sent; the receiver widens it.
#include "model/gpt_model.h"

#include <algorithm>
#include <initializer_list>

namespace pipelane {

bool GptStage::takes_bf16(std::initializer_list<OpKind> ops) const {
  return bf16_storage() &&
         std::all_of(ops.begin(), ops.end(), [&](OpKind op) { return backend_.supports(op, DType::BF16); });
}

bool GptStage::bf16_norm_outputs() const {
  const OpKind norm = config().norm == NormKind::LayerNorm ? OpKind::LayerNormForward : OpKind::RmsNormForward;
  return !sequence_parallel_ && takes_bf16({norm, OpKind::MatmulForward, OpKind::MatmulBackward}) &&
         (config().mlp != MlpKind::Gelu || takes_bf16({OpKind::MatmulGeluForward}));
}

std::uint32_t GptStage::plan_bf16_direct_values() const {
  const auto bit = [](float* LayerActivations::*member) { return 1u << layer_value_index(member); };
  std::uint32_t direct = 0;
  if (bf16_probabilities()) direct |= bit(&LayerActivations::att);
  if (bf16_norm_outputs()) direct |= bit(&LayerActivations::ln1) | bit(&LayerActivations::ln2);
  if (bf16_norm_inputs()) direct |= bit(&LayerActivations::res_attn);
  if (bf16_mlp_activations()) direct |= bit(&LayerActivations::fch_gelu);
  if (bf16_attention_output()) direct |= bit(&LayerActivations::atty);
  if (bf16_gemm_outputs())
    direct |= bit(&LayerActivations::qkv) | bit(&LayerActivations::fch) | bit(&LayerActivations::up);
  return direct;
}

bool GptStage::bf16_gemm_outputs() const {
  const OpKind backward = config().mlp == MlpKind::Gelu ? OpKind::MatmulBackwardInputDgelu : OpKind::SwigluBackward;
  return bf16_probabilities() && takes_bf16({backward});
}

void GptStage::keep_value(const LayerActivations& h, float* LayerActivations::*member, std::size_t n) const {
  std::uint16_t* kept = h.bf16[layer_value_index(member)];
  if (kept && h.*member) backend_.cast_to_bf16(kept, h.*member, n, stream_);
}

bool GptStage::bf16_attention_output() const {
  return bf16_probabilities() && takes_bf16({OpKind::MatmulForward, OpKind::MatmulBackward});
}

bool GptStage::bf16_mlp_activations() const {
  const OpKind activation = config().mlp == MlpKind::Gelu ? OpKind::MatmulGeluForward : OpKind::SwigluForward;
  return takes_bf16({activation, OpKind::MatmulForward, OpKind::MatmulBackward});
}

bool GptStage::bf16_norm_inputs() const {
  if (config().norm == NormKind::LayerNorm)
    return takes_bf16({OpKind::LayerNormBackward, OpKind::LayerNormBackwardInput, OpKind::LayerNormBackwardParams});
  return takes_bf16({OpKind::RmsNormBackward, OpKind::RmsNormBackwardInput, OpKind::RmsNormBackwardParams});
}

bool GptStage::bf16_probabilities() const {
  if (config().split_projections()) return takes_bf16({OpKind::AttentionForwardGqa, OpKind::AttentionBackwardGqa});
  return takes_bf16({OpKind::AttentionForward, OpKind::AttentionBackward});
}

std::array<std::size_t, kLayerValueCount> GptStage::layer_value_sizes(const Dims& d) const {
  const std::size_t N = static_cast<std::size_t>(d.N), n = static_cast<std::size_t>(d.n);
  const bool split = config().split_projections(), swiglu = config().mlp == MlpKind::SwiGlu;
  const std::size_t saved = split ? backend_.attention_gqa_saved_floats(d.B, d.T, d.NH, d.hs)
                                  : backend_.attention_saved_floats(d.B, d.T, d.CA, d.NH);
  const bool probabilities = saved == static_cast<std::size_t>(d.B) * d.NH * d.T * d.T;
  std::array<std::size_t, kLayerValueCount> sizes{};
  const auto set = [&](float* LayerActivations::*member, std::size_t count) { sizes[layer_value_index(member)] = count; };
  set(&LayerActivations::ln1, n * d.C);
  set(&LayerActivations::qkv, split ? N * (d.CA + 2 * d.KV) : N * 3 * d.CA);
  set(&LayerActivations::att, probabilities ? saved : 0);
  set(&LayerActivations::atty, N * d.CA);
  set(&LayerActivations::res_attn, n * d.C);
  set(&LayerActivations::ln2, n * d.C);
  set(&LayerActivations::fch, N * d.CM);
  set(&LayerActivations::up, swiglu ? N * d.CM : 0);
  set(&LayerActivations::fch_gelu, N * d.CM);
  set(&LayerActivations::res_out, n * d.C);
  return sizes;
}

std::size_t GptStage::io_bytes(int B, int T) const {
  return static_cast<std::size_t>(sequence_rows(B, T)) * config().d_model * dtype_size(storage_);
}

void GptStage::store_layer(const MicrobatchActivations& a, const LayerActivations& h, int l, const Dims& d) const {
  if (!bf16_storage()) return;
  backend_.round_to_bf16(h.res_out, d.nC, stream_);
  const auto sizes = layer_value_sizes(d);
  const StoredLayer& stored = a.stored[l];
  // A value the layer wrote in bf16 itself (bf16_direct_values) has no fp32 source here.
  for (std::size_t i = 0; i < kLayerValueCount; ++i)
    if (stored.values[i] && h.*kLayerValues[i] && !(bf16_direct_values() >> i & 1u))
      backend_.cast_to_bf16(stored.values[i], h.*kLayerValues[i], sizes[i], stream_);
}

void GptStage::round_layer(const LayerActivations& h, const Dims& d) const {
  if (!bf16_storage()) return;
  const auto sizes = layer_value_sizes(d);
  for (std::size_t i = 0; i < kLayerValueCount; ++i)
    if (sizes[i] != 0 && h.*kLayerValues[i]) backend_.round_to_bf16(h.*kLayerValues[i], sizes[i], stream_);
}

void GptStage::load_layer(const MicrobatchActivations& a, StageScratch& s, int l, const Dims& d) const {
  if (!bf16_storage()) return;
  if (s.storage_layers.empty()) return;  // every value is read in bf16 where it is kept
  const auto sizes = layer_value_sizes(d);
  const LayerActivations& workspace = s.storage_layers.front();
  const StoredLayer& stored = a.stored[l];
  // Not its output: no backward reads it (the next layer's input comes from kept_layer_input);
  // nor what the backward reads in bf16 itself (no room for it in the workspace).
  for (std::size_t i = 0; i + 1 < kLayerValueCount; ++i)
    if (stored.values[i] && workspace.*kLayerValues[i])
      backend_.cast_from_bf16(workspace.*kLayerValues[i], stored.values[i], sizes[i], stream_);
}

const float* GptStage::kept_layer_input(const MicrobatchActivations& a, StageScratch& s, int l, const Dims& d) const {
  if (!bf16_storage()) return l == 0 ? a.input : a.layers[l - 1].res_out;
  backend_.cast_from_bf16(s.storage_x, l == 0 ? a.input_bf16 : a.stored[l - 1].res_out(), d.nC, stream_);
  return s.storage_x;
}

const float* GptStage::take_input(MicrobatchActivations& a, StageScratch& s, const void* input, const Dims& d) const {
  if (!bf16_storage()) {
    backend_.copy(a.input, input, d.nC * sizeof(float), stream_);
    return a.input;
  }
  backend_.copy(a.input_bf16, input, d.nC * sizeof(std::uint16_t), stream_);
  backend_.cast_from_bf16(s.storage_x, a.input_bf16, d.nC, stream_);
  return s.storage_x;
}

void GptStage::take_gradient(float* dx, const void* grad_output, const Dims& d) const {
  if (bf16_storage()) backend_.cast_from_bf16(dx, static_cast<const std::uint16_t*>(grad_output), d.nC, stream_);
  else backend_.copy(dx, grad_output, d.nC * sizeof(float), stream_);
}

void GptStage::send_gradient(void* grad_input, const float* dx, const Dims& d) const {
  if (bf16_storage()) backend_.cast_to_bf16(static_cast<std::uint16_t*>(grad_input), dx, d.nC, stream_);
  else backend_.copy(grad_input, dx, d.nC * sizeof(float), stream_);
}

void GptStage::keep_embedding(MicrobatchActivations& a, float* x, const Dims& d) const {
  if (!bf16_storage()) return;
  backend_.round_to_bf16(x, d.nC, stream_);
  backend_.cast_to_bf16(a.input_bf16, x, d.nC, stream_);
}

}  // namespace pipelane
