#include "model/gpt_layout.h"

#include <cmath>
#include <stdexcept>

#include "runtime/arena.h"

namespace pipelane {

std::size_t ParamEntry::full_numel() const {
  std::size_t n = 1;
  for (auto d : full_shape) n *= static_cast<std::size_t>(d);
  return n;
}

ParamLayout::ParamLayout(const GptConfig& cfg, StageRange range, TensorParallelShard tp)
    : cfg_(cfg), range_(range), tp_(tp) {
  if (const std::string p = cfg.problem(); !p.empty()) throw std::invalid_argument("GptConfig: " + p);
  if (range.first_layer < 0 || range.last_layer > cfg.layers || range.first_layer > range.last_layer)
    throw std::invalid_argument("StageRange: layers [" + std::to_string(range.first_layer) + ", " +
                                std::to_string(range.last_layer) + ") outside the model's " +
                                std::to_string(cfg.layers));
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw std::invalid_argument("tensor parallel rank " + std::to_string(tp.rank) + " of " +
                                std::to_string(tp.size));
  if (cfg.heads % tp.size != 0)
    throw std::invalid_argument("tensor parallel size (" + std::to_string(tp.size) +
                                ") does not divide heads (" + std::to_string(cfg.heads) + ")");
  if (cfg.n_kv_heads() % tp.size != 0)
    throw std::invalid_argument("tensor parallel size (" + std::to_string(tp.size) +
                                ") does not divide kv_heads (" + std::to_string(cfg.n_kv_heads()) + ")");
  if (cfg.mlp_hidden() % tp.size != 0)
    throw std::invalid_argument("tensor parallel size (" + std::to_string(tp.size) +
                                ") does not divide the MLP width (" + std::to_string(cfg.mlp_hidden()) + ")");
  vocab_padded_ = cfg.padded_vocab_for_tp(tp.size);
  vocab_local_ = vocab_padded_ / tp.size;
  vocab_begin_ = tp.rank * vocab_local_;
  if (cfg.split_projections()) add_llama_family();
  else add_gpt2_family();
}

// GPT2LMHeadModel's names (without "transformer."), in its order.
void ParamLayout::add_gpt2_family() {
  const GptConfig& cfg = cfg_;
  const std::int64_t C = cfg.d_model, Vp = vocab_padded_, F = cfg.mlp_hidden();
  const float std_w = 0.02f;
  // GPT-2 scales the init of projections into the residual stream by 1/sqrt(2 * layers).
  const float std_resid = 0.02f / std::sqrt(2.0f * cfg.layers);
  constexpr int kRep = -1, kRows = 0, kCols = 1;
  const StageRange& range = range_;
  if (range.has_embedding || (range.has_head && cfg.tie_embeddings)) wte = add("wte", {Vp, C}, kRows, 1, true, std_w);
  if (range.has_embedding && cfg.has_learned_positions()) wpe = add("wpe", {cfg.max_seq_len, C}, kRep, 1, true, std_w);
  for (int l = range.first_layer; l < range.last_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerOffsets o = no_offsets();
    o.ln1w = add(h + "ln_1.weight", {C}, kRep, 1, false, 0.f, 1.f);
    if (cfg.norm_has_bias()) o.ln1b = add(h + "ln_1.bias", {C}, kRep, 1, false, 0.f);
    o.qkvw = add(h + "attn.c_attn.weight", {3 * C, C}, kRows, 3, true, std_w);
    if (cfg.qkv_bias()) o.qkvb = add(h + "attn.c_attn.bias", {3 * C}, kRows, 3, false, 0.f);
    o.attprojw = add(h + "attn.c_proj.weight", {C, C}, kCols, 1, true, std_resid);
    if (cfg.linear_bias()) o.attprojb = add(h + "attn.c_proj.bias", {C}, kRep, 1, false, 0.f);
    o.ln2w = add(h + "ln_2.weight", {C}, kRep, 1, false, 0.f, 1.f);
    if (cfg.norm_has_bias()) o.ln2b = add(h + "ln_2.bias", {C}, kRep, 1, false, 0.f);
    o.fcw = add(h + "mlp.c_fc.weight", {F, C}, kRows, 1, true, std_w);
    if (cfg.linear_bias()) o.fcb = add(h + "mlp.c_fc.bias", {F}, kRows, 1, false, 0.f);
    o.fcprojw = add(h + "mlp.c_proj.weight", {C, F}, kCols, 1, true, std_resid);
    if (cfg.linear_bias()) o.fcprojb = add(h + "mlp.c_proj.bias", {C}, kRep, 1, false, 0.f);
    layers.push_back(o);
  }
  if (range.has_head) {
    lnfw = add("ln_f.weight", {C}, kRep, 1, false, 0.f, 1.f);
    if (cfg.norm_has_bias()) lnfb = add("ln_f.bias", {C}, kRep, 1, false, 0.f);
    head = cfg.tie_embeddings ? wte : add(kHeadName, {Vp, C}, kRows, 1, true, std_w);
  }
}

// LlamaForCausalLM's names, in its order (Mistral and Qwen2 use the same). Hugging Face's
// initialisation: normal(0, 0.02) for every matrix and embedding, no depth scaling; norms 1.
void ParamLayout::add_llama_family() {
  const GptConfig& cfg = cfg_;
  const std::int64_t C = cfg.d_model, Vp = vocab_padded_, F = cfg.mlp_hidden();
  const std::int64_t KV = static_cast<std::int64_t>(cfg.n_kv_heads()) * cfg.head_size();
  const float std_w = 0.02f;
  constexpr int kRep = -1, kRows = 0, kCols = 1;
  const StageRange& range = range_;
  const bool norm_bias = cfg.norm_has_bias();
  if (range.has_embedding || (range.has_head && cfg.tie_embeddings))
    wte = add("model.embed_tokens.weight", {Vp, C}, kRows, 1, true, std_w);
  if (range.has_embedding && cfg.has_learned_positions())
    wpe = add("model.embed_positions.weight", {cfg.max_seq_len, C}, kRep, 1, true, std_w);
  for (int l = range.first_layer; l < range.last_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    LayerOffsets o = no_offsets();
    o.ln1w = add(h + "input_layernorm.weight", {C}, kRep, 1, false, 0.f, 1.f);
    if (norm_bias) o.ln1b = add(h + "input_layernorm.bias", {C}, kRep, 1, false, 0.f);
    o.qkvw = add(h + "self_attn.q_proj.weight", {C, C}, kRows, 1, true, std_w);
    if (cfg.qkv_bias()) o.qkvb = add(h + "self_attn.q_proj.bias", {C}, kRows, 1, false, 0.f);
    o.kw = add(h + "self_attn.k_proj.weight", {KV, C}, kRows, 1, true, std_w);
    if (cfg.qkv_bias()) o.kb = add(h + "self_attn.k_proj.bias", {KV}, kRows, 1, false, 0.f);
    o.vw = add(h + "self_attn.v_proj.weight", {KV, C}, kRows, 1, true, std_w);
    if (cfg.qkv_bias()) o.vb = add(h + "self_attn.v_proj.bias", {KV}, kRows, 1, false, 0.f);
    o.attprojw = add(h + "self_attn.o_proj.weight", {C, C}, kCols, 1, true, std_w);
    if (cfg.linear_bias()) o.attprojb = add(h + "self_attn.o_proj.bias", {C}, kRep, 1, false, 0.f);
    o.ln2w = add(h + "post_attention_layernorm.weight", {C}, kRep, 1, false, 0.f, 1.f);
    if (norm_bias) o.ln2b = add(h + "post_attention_layernorm.bias", {C}, kRep, 1, false, 0.f);
    if (cfg.mlp == MlpKind::SwiGlu) {
      o.gatew = add(h + "mlp.gate_proj.weight", {F, C}, kRows, 1, true, std_w);
      if (cfg.linear_bias()) o.gateb = add(h + "mlp.gate_proj.bias", {F}, kRows, 1, false, 0.f);
    }
    o.fcw = add(h + "mlp.up_proj.weight", {F, C}, kRows, 1, true, std_w);
    if (cfg.linear_bias()) o.fcb = add(h + "mlp.up_proj.bias", {F}, kRows, 1, false, 0.f);
    o.fcprojw = add(h + "mlp.down_proj.weight", {C, F}, kCols, 1, true, std_w);
    if (cfg.linear_bias()) o.fcprojb = add(h + "mlp.down_proj.bias", {C}, kRep, 1, false, 0.f);
    layers.push_back(o);
  }
  if (range.has_head) {
    lnfw = add("model.norm.weight", {C}, kRep, 1, false, 0.f, 1.f);
    if (norm_bias) lnfb = add("model.norm.bias", {C}, kRep, 1, false, 0.f);
    head = cfg.tie_embeddings ? wte : add(kHeadName, {Vp, C}, kRows, 1, true, std_w);
  }
}

LayerOffsets ParamLayout::no_offsets() {
  return {npos, npos, npos, npos, npos, npos, npos, npos, npos, npos, npos, npos,
          npos, npos, npos, npos, npos, npos};
}

std::string ParamLayout::embedding_name() const {
  return cfg_.split_projections() ? "model.embed_tokens.weight" : "wte";
}

const ParamEntry* ParamLayout::tied_embedding() const {
  return cfg_.tie_embeddings ? find(embedding_name()) : nullptr;
}

std::size_t ParamLayout::add(std::string name, std::vector<std::int64_t> full_shape, int shard_dim,
                             int shard_blocks, bool decay, float std, float value) {
  ParamEntry e;
  e.name = std::move(name);
  e.full_shape = full_shape;
  e.shape = std::move(full_shape);
  e.shard_dim = shard_dim;
  e.shard_blocks = shard_dim >= 0 ? shard_blocks : 1;
  e.tp_rank = tp_.rank;
  e.tp_size = tp_.size;
  if (e.sharded()) {
    const std::int64_t parts = static_cast<std::int64_t>(e.shard_blocks) * tp_.size;
    if (e.shape[shard_dim] % parts != 0)
      throw std::logic_error("ParamLayout: " + e.name + " cannot be split " + std::to_string(parts) +
                             " ways");
    e.shape[shard_dim] /= tp_.size;
  }
  e.numel = 1;
  for (auto d : e.shape) e.numel *= static_cast<std::size_t>(d);
  e.offset = total_;
  e.decay = decay;
  e.init_std = std;
  e.init_value = value;
  // Keep every tensor 64-byte aligned so vector loads never straddle tensors.
  total_ += align_up(e.numel, 16);
  entries_.push_back(std::move(e));
  return entries_.back().offset;
}

const ParamEntry* ParamLayout::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

namespace {
// The tensor as [outer, dim, inner] around its shard dimension.
struct Split {
  std::size_t outer = 1, inner = 1, full_dim = 1, local_dim = 1, block = 1, piece = 1;
};
Split split_of(const ParamEntry& e) {
  Split s;
  const int d = e.shard_dim;
  for (int i = 0; i < d; ++i) s.outer *= static_cast<std::size_t>(e.full_shape[i]);
  for (std::size_t i = d + 1; i < e.full_shape.size(); ++i)
    s.inner *= static_cast<std::size_t>(e.full_shape[i]);
  s.full_dim = static_cast<std::size_t>(e.full_shape[d]);
  s.local_dim = static_cast<std::size_t>(e.shape[d]);
  s.block = s.full_dim / static_cast<std::size_t>(e.shard_blocks);
  s.piece = s.block / static_cast<std::size_t>(e.tp_size);
  return s;
}
}  // namespace

std::size_t full_index_of(const ParamEntry& e, std::size_t local_index) {
  if (!e.sharded()) return local_index;
  const Split s = split_of(e);
  const std::size_t inner = local_index % s.inner, rest = local_index / s.inner;
  const std::size_t k = rest % s.local_dim, outer = rest / s.local_dim;
  const std::size_t f = (k / s.piece) * s.block + static_cast<std::size_t>(e.tp_rank) * s.piece +
                        k % s.piece;
  return (outer * s.full_dim + f) * s.inner + inner;
}

std::size_t local_index_of(const ParamEntry& e, std::size_t full_index) {
  if (!e.sharded()) return full_index;
  const Split s = split_of(e);
  const std::size_t inner = full_index % s.inner, rest = full_index / s.inner;
  const std::size_t f = rest % s.full_dim, outer = rest / s.full_dim;
  const std::size_t within = f % s.block;
  if (within / s.piece != static_cast<std::size_t>(e.tp_rank)) return ParamLayout::npos;
  const std::size_t k = (f / s.block) * s.piece + within % s.piece;
  return (outer * s.local_dim + k) * s.inner + inner;
}

// Entries can come from files (checkpoints): before any index is computed from one, its fields
// must describe a real slice, or full_index_of divides by zero or lands outside the buffers.
void check_param_entry(const ParamEntry& e) {
  const auto bad = [&](const std::string& what) {
    throw std::invalid_argument(e.name + ": " + what);
  };
  const std::size_t rank = e.full_shape.size();
  if (rank == 0 || e.shape.size() != rank)
    bad("shape has " + std::to_string(e.shape.size()) + " dimensions, full_shape " + std::to_string(rank));
  std::size_t numel = 1, full = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    if (e.shape[d] < 1 || e.full_shape[d] < 1) bad("a dimension is below 1");
    if (__builtin_mul_overflow(numel, static_cast<std::size_t>(e.shape[d]), &numel) ||
        __builtin_mul_overflow(full, static_cast<std::size_t>(e.full_shape[d]), &full))
      bad("more elements than fit in memory");
  }
  if (numel != e.numel) bad("numel " + std::to_string(e.numel) + " is not the product of its shape");
  if (e.tp_size < 1 || e.tp_rank < 0 || e.tp_rank >= e.tp_size)
    bad("tensor-parallel rank " + std::to_string(e.tp_rank) + " of " + std::to_string(e.tp_size));
  if (e.shard_dim < -1 || e.shard_dim >= static_cast<int>(rank) || e.shard_blocks < 1)
    bad("shard_dim " + std::to_string(e.shard_dim) + " / shard_blocks " + std::to_string(e.shard_blocks) +
        " do not fit a tensor of " + std::to_string(rank) + " dimensions");
  for (std::size_t d = 0; d < rank; ++d) {
    const bool split = e.sharded() && static_cast<int>(d) == e.shard_dim;
    if (!split && e.shape[d] != e.full_shape[d]) bad("shape differs from full_shape outside the split dimension");
    if (split && (e.full_shape[d] % (static_cast<std::int64_t>(e.shard_blocks) * e.tp_size) != 0 ||
                  e.full_shape[d] / e.tp_size != e.shape[d]))
      bad("dimension " + std::to_string(d) + " of " + std::to_string(e.full_shape[d]) + " cannot hold " +
          std::to_string(e.shard_blocks) + " blocks split " + std::to_string(e.tp_size) + " ways into " +
          std::to_string(e.shape[d]));
  }
}

void slice_from_full(const ParamEntry& e, const float* full, float* shard) {
  check_param_entry(e);
  for (std::size_t i = 0; i < e.numel; ++i) shard[i] = full[full_index_of(e, i)];
}

void place_into_full(const ParamEntry& e, const float* shard, float* full) {
  check_param_entry(e);
  for (std::size_t i = 0; i < e.numel; ++i) full[full_index_of(e, i)] = shard[i];
}

void gather_full_tensor(const std::vector<const ParamEntry*>& entries,
                        const std::vector<const float*>& shards, float* full) {
  if (entries.empty() || entries.size() != shards.size())
    throw std::invalid_argument("gather_full_tensor: one entry and one buffer per rank");
  const ParamEntry& first = *entries[0];
  if (static_cast<int>(entries.size()) != first.tp_size)
    throw std::invalid_argument("gather_full_tensor: " + first.name + " needs all " +
                                std::to_string(first.tp_size) + " ranks");
  for (std::size_t r = 0; r < entries.size(); ++r) {
    const ParamEntry& e = *entries[r];
    if (e.name != first.name || e.tp_rank != static_cast<int>(r) || e.tp_size != first.tp_size ||
        e.full_shape != first.full_shape || e.shard_dim != first.shard_dim || e.shard_blocks != first.shard_blocks)
      throw std::invalid_argument("gather_full_tensor: entry " + std::to_string(r) + " is not " +
                                  first.name + " of tp rank " + std::to_string(r) + " with the slicing of rank 0");
    check_param_entry(e);
  }
  if (!first.sharded()) {
    for (std::size_t i = 0; i < first.numel; ++i) full[i] = shards[0][i];
    return;
  }
  for (std::size_t r = 0; r < entries.size(); ++r) place_into_full(*entries[r], shards[r], full);
}

}  // namespace pipelane
