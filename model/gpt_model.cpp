#include "model/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "model/normal_rng.h"
#include "model/rope_table.h"

namespace pipelane {

namespace {

TensorParallelShard shard_of(const TensorParallelComm* tp) {
  return tp ? TensorParallelShard{tp->rank(), tp->size()} : TensorParallelShard{};
}

}  // namespace

GptStage::GptStage(const GptConfig& cfg, StageRange range, Backend& backend, Stream& stream,
                   TensorParallelComm* tp, RecomputeOptions recompute, bool sequence_parallel, DType storage)
    : layout_(cfg, range, shard_of(tp)), backend_(backend), stream_(stream),
      tp_(tp && tp->size() > 1 ? tp : nullptr), sequence_parallel_(sequence_parallel), storage_(storage),
      recompute_(recompute), recompute_plan_(plan_recompute(recompute, range.num_layers())) {
  if (sequence_parallel && !tp_)
    throw std::invalid_argument("sequence parallelism splits the sequence over tensor-parallel ranks: it needs tp > 1");
  if (storage != DType::F32 && storage != DType::BF16)
    throw std::invalid_argument(std::string("storage ") + dtype_name(storage) + ": expected f32 or bf16");
  if (storage == DType::BF16 && !backend.supports(OpKind::CastToBf16, DType::BF16))
    throw std::invalid_argument("backend " + backend.name() + " has no bf16 buffers (cast_to_bf16)");
  check_backend_supports_config();
  bf16_direct_values_ = plan_bf16_direct_values();
}

int GptStage::sequence_rows(int B, int T) const {
  const long long N = static_cast<long long>(B) * T;
  if (!sequence_parallel_) return static_cast<int>(N);
  if (N % tp_->size() != 0)
    throw std::invalid_argument("sequence parallelism: tp = " + std::to_string(tp_->size()) +
                                " does not divide the microbatch's " + std::to_string(N) + " positions (B*T)");
  return static_cast<int>(N / tp_->size());
}

// Each rank's norm gradients summed over its rows only; their sum over the group is the
// gradient over every row. Megatron-LM all-reduces these (sequence_parallel parameters) likewise.
void GptStage::reduce_sequence_parallel_gradients(float* grads) const {
  if (!sequence_parallel_) return;
  const int C = config().d_model;
  const auto reduce = [&](std::size_t offset) {
    if (offset != ParamLayout::npos) tp_->all_reduce_sum(grads + offset, C);
  };
  for (const LayerOffsets& o : layout_.layers)
    for (std::size_t offset : {o.ln1w, o.ln1b, o.ln2w, o.ln2b}) reduce(offset);
  if (range().has_head)
    for (std::size_t offset : {layout_.lnfw, layout_.lnfb}) reduce(offset);
}

// The ops a config needs beyond GPT-2's, so a backend without them (the CUDA backend for now) is
// refused with one line before anything runs.
void GptStage::check_backend_supports_config() const {
  const GptConfig& c = config();
  std::vector<std::pair<OpKind, const char*>> needed;
  if (c.norm == NormKind::RmsNorm)
    for (OpKind op : {OpKind::RmsNormForward, OpKind::RmsNormBackwardInput, OpKind::RmsNormBackwardParams})
      needed.push_back({op, "norm = rmsnorm"});
  if (c.position == PositionKind::Rope) {
    for (OpKind op : {OpKind::RopeForward, OpKind::RopeBackward}) needed.push_back({op, "position = rope"});
    needed.push_back({OpKind::EmbeddingBackwardTokens, "position = rope"});
  }
  if (c.mlp == MlpKind::SwiGlu)
    for (OpKind op : {OpKind::SwigluForward, OpKind::SwigluBackward}) needed.push_back({op, "mlp = swiglu"});
  if (c.split_projections())
    for (OpKind op : {OpKind::AttentionForwardGqa, OpKind::AttentionBackwardGqa})
      needed.push_back({op, "arch = llama (grouped-query attention)"});
  for (const auto& [op, why] : needed)
    if (!backend_.supports(op, DType::F32))
      throw std::invalid_argument("backend " + backend_.name() + " has no " + op_kind_name(op) + ", which " + why +
                                  " needs");
}

void GptStage::reduce_sum(float* data, std::size_t n) const {
  if (tp_) tp_->all_reduce_sum(data, n);
}

const float* GptStage::gather_rows(const float* part, float* full, const Dims& d) const {
  if (!sequence_parallel_) return part;
  tp_->all_gather(part, full, d.nC);
  return full;
}

ActivationIn GptStage::gather_rows(ActivationIn part, float* full, const Dims& d) const {
  if (!sequence_parallel_) return part;
  if (part.is_bf16()) throw std::logic_error("GptStage::gather_rows: a bf16 buffer under sequence parallelism");
  return gather_rows(part.f32, full, d);
}

void GptStage::sum_partials(float* partial, const Dims& d) const {
  if (sequence_parallel_) tp_->reduce_scatter_sum(partial, d.nC);
  else reduce_sum(partial, d.NC);
}

// One layer's buffers: what `keeps` says it keeps (model/recompute.h), plus the split backward's
// gradients, which live from B to W whatever forward kept.
template <typename Alloc>
LayerActivations GptStage::plan_layer(Alloc&& alloc, const Dims& d, LayerKeeps keeps, bool ends_group,
                                      bool split_backward, StoredLayer* stored, std::uint32_t without) const {
  // n: the residual stream's rows on this rank (all N without sequence parallelism).
  const std::size_t N = static_cast<std::size_t>(d.N), n = static_cast<std::size_t>(d.n), C = d.C, CA = d.CA,
                    CM = d.CM, KV = d.KV;
  const bool layernorm = config().norm == NormKind::LayerNorm, split = config().split_projections();
  const bool swiglu = config().mlp == MlpKind::SwiGlu;
  // q, k and v: one [N, 3CA] (c_attn) or [N, CA + 2KV] (q_proj, k_proj, v_proj) allocation.
  const std::size_t qkv = split ? N * (CA + 2 * KV) : N * 3 * CA;
  const std::size_t saved = split ? backend_.attention_gqa_saved_floats(d.B, d.T, d.NH, d.hs)
                                  : backend_.attention_saved_floats(d.B, d.T, d.CA, d.NH);
  LayerActivations x{};
  // A value of kLayerValues: fp32 here, or under bf16 storage bf16 in `stored` (whose sizes
  // layer_value_sizes says; 0 there: it stays fp32 here).
  const auto sizes = stored ? layer_value_sizes(d) : std::array<std::size_t, kLayerValueCount>{};
  const auto value = [&](float* LayerActivations::*member, std::size_t count, const char* what) {
    const std::size_t i = layer_value_index(member);
    if (without >> i & 1u) return;
    if (stored && sizes[i] != 0) stored->values[i] = reinterpret_cast<std::uint16_t*>(alloc((count + 1) / 2, what));
    else x.*member = alloc(count, what);
  };
  if (keeps != LayerKeeps::Output) {
    value(&LayerActivations::ln1, n * C, "activations.ln1");
    if (layernorm) x.ln1_mean = alloc(n, "activations.ln1_mean");
    x.ln1_rstd = alloc(n, "activations.ln1_rstd");
    value(&LayerActivations::qkv, qkv, "activations.qkv");
    if (split && x.qkv) x.q = x.qkv, x.k = x.qkv + N * CA, x.v = x.k + N * KV;
    if (keeps == LayerKeeps::Everything) value(&LayerActivations::att, saved, "activations.att");
    value(&LayerActivations::atty, N * CA, "activations.atty");
    value(&LayerActivations::res_attn, n * C, "activations.res_attn");
    value(&LayerActivations::ln2, n * C, "activations.ln2");
    if (layernorm) x.ln2_mean = alloc(n, "activations.ln2_mean");
    x.ln2_rstd = alloc(n, "activations.ln2_rstd");
    value(&LayerActivations::fch, N * CM, "activations.fch");
    if (swiglu) value(&LayerActivations::up, N * CM, "activations.up");
    value(&LayerActivations::fch_gelu, N * CM, "activations.fch_gelu");
  }
  if (keeps != LayerKeeps::Output || ends_group) value(&LayerActivations::res_out, n * C, "activations.res_out");
  if (split_backward) {
    x.d_res_out = alloc(n * C, "activations.d_res_out");
    x.d_fch = alloc(N * CM, "activations.d_fch");
    if (swiglu) x.d_up = alloc(N * CM, "activations.d_up");
    x.d_ln2 = alloc(n * C, "activations.d_ln2");
    x.d_res_attn = alloc(n * C, "activations.d_res_attn");
    x.d_qkv = alloc(qkv, "activations.d_qkv");
    x.d_ln1 = alloc(n * C, "activations.d_ln1");
  }
  return x;
}

template <typename Alloc>
MicrobatchActivations GptStage::plan_activations(Alloc&& alloc, int B, int T,
                                                 bool split_backward) const {
  const Dims d = dims(B, T);
  const std::size_t N = static_cast<std::size_t>(d.N), n = static_cast<std::size_t>(d.n), C = d.C;
  const bool layernorm = config().norm == NormKind::LayerNorm;
  MicrobatchActivations a;
  a.B = B;
  a.T = T;
  if (bf16_storage()) {
    a.input_bf16 = reinterpret_cast<std::uint16_t*>(alloc((n * C + 1) / 2, "activations.input"));
    a.stored.resize(static_cast<std::size_t>(range().num_layers()));
  } else {
    a.input = alloc(n * C, "activations.input");
  }
  for (int l = 0; l < range().num_layers(); ++l) {
    const LayerRecompute& r = recompute_plan_[l];
    a.layers.push_back(plan_layer(alloc, d, r.keeps, r.ends_group(l), split_backward,
                                  bf16_storage() ? &a.stored[l] : nullptr));
  }
  if (range().has_head) {
    a.lnf = alloc(N * C, "activations.lnf");  // all rows: the head reads every row
    if (layernorm) a.lnf_mean = alloc(n, "activations.lnf_mean");
    a.lnf_rstd = alloc(n, "activations.lnf_rstd");
    a.losses = alloc(N, "activations.losses");
    a.dlnf = alloc(n * C, "activations.dlnf");  // this rank's rows (sequence parallelism)
  }
  a.split_backward = split_backward;
  if (split_backward && range().has_embedding) a.d_input = alloc(n * C, "activations.d_input");
  return a;
}

template <typename Alloc>
StageScratch GptStage::plan_scratch(Alloc&& alloc, int B, int T) const {
  const Dims d = dims(B, T);
  const std::size_t N = static_cast<std::size_t>(d.N), C = d.C;
  const bool split = config().split_projections(), swiglu = config().mlp == MlpKind::SwiGlu;
  StageScratch s;
  s.proj = alloc(N * C, "scratch.proj");
  s.dres = alloc(N * C, "scratch.dres");
  s.dtmp = alloc(N * C, "scratch.dtmp");
  s.dqkv = alloc(split ? N * (d.CA + 2 * d.KV) : N * 3 * d.CA, "scratch.dqkv");
  s.d4c = alloc(N * d.CM, "scratch.d4c");
  if (range().has_head) {
    if (tp_) {
      s.logits = alloc(backend_.lm_head_vocab_parallel_scratch_floats(static_cast<int>(N),
                                                                      layout_.vocab_local()),
                       "scratch.logits");
    } else {
      const int Vp = config().padded_vocab();
      s.logits = alloc(backend_.lm_head_scratch_floats(static_cast<int>(N), Vp), "scratch.logits");
    }
  }
  if (split || swiglu) s.dtmp2 = alloc(N * C, "scratch.dtmp2");
  if (swiglu) {
    s.dgate = alloc(N * d.CM, "scratch.dgate");
    s.dup = alloc(N * d.CM, "scratch.dup");
  }
  if (config().position == PositionKind::Rope)
    s.rope = alloc(static_cast<std::size_t>(config().max_seq_len) * d.hs, "scratch.rope");
  const std::size_t saved = split ? backend_.attention_gqa_saved_floats(B, T, d.NH, d.hs)
                                  : backend_.attention_saved_floats(B, T, d.CA, d.NH);
  const auto bf16_probabilities_buffer = [&](const char* what) {
    return reinterpret_cast<std::uint16_t*>(alloc((saved + 1) / 2, what));
  };
  if (recompute_.kind == RecomputeKind::Selective) {
    if (bf16_probabilities()) s.recompute_att_bf16 = bf16_probabilities_buffer("recompute.att");
    else s.recompute_att = alloc(saved, "recompute.att");
    s.recompute_atty = alloc(N * d.CA, "recompute.atty");
  }
  // A full rerun's layers; their probabilities in bf16 where the backend takes them so (under bf16
  // storage backward reads them rounded either way).
  const std::uint32_t att_bit = 1u << layer_value_index(&LayerActivations::att);
  for (int k = 0; k < recompute_workspace_layers(recompute_plan_); ++k) {
    s.recompute_layers.push_back(
        plan_layer(alloc, d, LayerKeeps::Everything, true, false, nullptr, bf16_probabilities() ? att_bit : 0));
    if (bf16_probabilities())
      s.recompute_layers.back().bf16[layer_value_index(&LayerActivations::att)] =
          bf16_probabilities_buffer("recompute.layer_att");
  }
  if (sequence_parallel_) {
    s.gathered = alloc(N * C, "scratch.gathered");
    s.dres_full = alloc(N * C, "scratch.dres_full");
  }
  if (bf16_storage()) {
    const bool any_kept = std::any_of(recompute_plan_.begin(), recompute_plan_.end(),
                                      [](const LayerRecompute& r) { return r.keeps != LayerKeeps::Output; });
    // Its output is s.storage_x (forward_view), not a buffer of its own; the values the ops keep in
    // bf16 themselves have none either. None at all when that leaves no value (the norms'
    // statistics are the layer's own: with_fp32_state_of).
    const std::uint32_t without = bf16_direct_values() | 1u << layer_value_index(&LayerActivations::res_out);
    const auto sizes = layer_value_sizes(d);
    bool any_value = false;
    for (std::size_t i = 0; i < kLayerValueCount; ++i) any_value |= sizes[i] != 0 && !(without >> i & 1u);
    if (any_kept && any_value)
      s.storage_layers.push_back(plan_layer(alloc, d, LayerKeeps::Everything, true, false, nullptr, without));
    s.storage_x = alloc(static_cast<std::size_t>(d.n) * C, "bf16_storage.x");
    s.storage_dx = alloc(static_cast<std::size_t>(d.n) * C, "bf16_storage.dx");
  }
  return s;
}

std::size_t GptStage::activation_bytes(int B, int T, bool split_backward) const {
  std::size_t total = 0;
  plan_activations(
      [&](std::size_t n, const char*) -> float* {
        total += align_up(n * sizeof(float), Arena::kDefaultAlignment);
        return nullptr;
      },
      B, T, split_backward);
  return total;
}

std::size_t GptStage::scratch_bytes(int B, int T) const {
  std::size_t total = 0;
  plan_scratch(
      [&](std::size_t n, const char*) -> float* {
        total += align_up(n * sizeof(float), Arena::kDefaultAlignment);
        return nullptr;
      },
      B, T);
  return total;
}

MicrobatchActivations GptStage::allocate_activations(Arena& arena, int B, int T,
                                                     bool split_backward) const {
  return plan_activations([&](std::size_t n, const char* what) { return arena.allocate_n<float>(n, what); },
                          B, T, split_backward);
}

StageScratch GptStage::allocate_scratch(Arena& arena, int B, int T) const {
  StageScratch s =
      plan_scratch([&](std::size_t n, const char* what) { return arena.allocate_n<float>(n, what); }, B, T);
  if (s.rope) {  // computed once, on the host, in double (model/rope_table.h)
    const std::vector<float> table = rope_table(config(), config().max_seq_len);
    backend_.copy(s.rope, table.data(), table.size() * sizeof(float), stream_);
    stream_.synchronize();
  }
  return s;
}

void GptStage::init_parameters(const ParamLayout& layout, float* params, std::uint64_t seed) {
  const GptConfig& cfg = layout.config();
  for (const ParamEntry& e : layout.entries()) {
    float* p = params + e.offset;
    if (e.init_std == 0.f) {
      for (std::size_t i = 0; i < e.numel; ++i) p[i] = e.init_value;
      continue;
    }
    // Padded vocabulary rows stay zero: they never receive gradient, and zero keeps them inert.
    std::size_t drawn = e.full_numel();
    if (layout.is_vocab_table(e.name)) drawn = static_cast<std::size_t>(cfg.vocab_size) * cfg.d_model;
    NormalRng rng(seed, e.name);
    if (!e.sharded()) {
      std::memset(p, 0, e.numel * sizeof(float));
      for (std::size_t i = 0; i < drawn; ++i) p[i] = e.init_std * rng.next();
      continue;
    }
    // A shard: walk the full tensor's stream in order and keep this rank's elements.
    std::memset(p, 0, e.numel * sizeof(float));
    for (std::size_t i = 0; i < drawn; ++i) {
      const float value = e.init_std * rng.next();
      const std::size_t local = local_index_of(e, i);
      if (local != ParamLayout::npos) p[local] = value;
    }
  }
}

void GptStage::logits(const StageWeights& params, const MicrobatchActivations& a, float* out) const {
  if (!range().has_head) throw std::logic_error("GptStage::logits: this stage has no head");
  backend_.lm_head_logits(out, a.lnf, params.gemm(layout_.head), a.B * a.T, config().d_model,
                      layout_.vocab_local(), stream_);
}

}  // namespace pipelane
