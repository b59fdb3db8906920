// Where every parameter of one stage lives in its flat buffer (llm.c style: one allocation, a size
// table). Gradients and AdamW moments use the same layout. Names follow Hugging Face's for the
// config's family, with global layer numbers, so a tensor has the same name on whichever stage
// holds it: GPT-2's ("h.3.attn.c_attn.weight") or LlamaForCausalLM's
// ("model.layers.3.self_attn.q_proj.weight"; the full list is in gpt_layout.cpp). Tensors a
// config lacks (biases under bias = none, wpe under position = rope, norm biases under rmsnorm)
// are not in the table, and their offsets are npos.
//
// Tensor parallelism (model/tensor_parallel.h). A layout built for tp rank r of tp holds, per
// name, a slice of the full model's tensor, recorded in its ParamEntry:
//   full_shape    the full model's shape (== shape when replicated or tp == 1);
//   shard_dim     -1: replicated, every rank holds the whole tensor; 0: rows split; 1: columns;
//   shard_blocks  the full tensor's shard_dim is made of shard_blocks equal blocks that are split
//                 separately: a rank's tensor is its 1/tp piece of block 0, then of block 1, ...
// With F = full_shape[shard_dim], block length F/shard_blocks and piece b = F/(shard_blocks*tp),
// local index k along shard_dim is full index (k / b) * (F / shard_blocks) + r * b + k % b.
// The tensors, for C = d_model, Vp = padded_vocab_for_tp(tp):
//   wte                  [Vp, C]    shard_dim 0, blocks 1 (vocab-parallel: rows [r*Vp/tp, ...))
//   h.L.attn.c_attn.*    [3C, C]/[3C] shard_dim 0, blocks 3 (q, k and v rows of this rank's heads)
//   h.L.mlp.c_fc.*       [4C, C]/[4C] shard_dim 0, blocks 1 (column-parallel)
//   h.L.attn.c_proj.weight [C, C]   shard_dim 1 (row-parallel: the input columns of the heads)
//   h.L.mlp.c_proj.weight  [C, 4C]  shard_dim 1 (row-parallel)
//   everything else (wpe, LayerNorms, both c_proj biases) replicated.
// The Llama family (KV = kv_heads * head size, F = the MLP width): q_proj [C, C] and its bias
// rows, k_proj/v_proj [KV, C] rows (this rank's kv heads), gate_proj/up_proj [F, C] rows,
// o_proj [C, C] and down_proj [C, F] columns, embed_tokens and an untied lm_head [Vp, C] rows
// (vocab-parallel); the norms and the o_proj/down_proj biases replicated.
// shard_dim/shard_blocks are recorded at tp == 1 too (they say how the tensor would be split);
// ParamEntry::sharded() is true only when tp > 1 actually cuts it. full_index_of / local_index_of
// map indices, slice_from_full / place_into_full / gather_full_tensor move whole tensors, so a
// checkpoint can store full tensors by name and load them at any tp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_config.h"

namespace pipelane {

struct ParamEntry {
  std::string name;
  std::size_t offset = 0;  // in floats
  std::vector<std::int64_t> shape;  // what this rank holds
  std::size_t numel = 0;
  bool decay = false;  // AdamW weight decay applies to matrices and embeddings only
  float init_std = 0;  // 0: constant init (init_value)
  float init_value = 0;
  // Tensor parallelism: see the top of this file.
  std::vector<std::int64_t> full_shape;
  int shard_dim = -1;
  int shard_blocks = 1;
  int tp_rank = 0, tp_size = 1;
  bool sharded() const { return shard_dim >= 0 && tp_size > 1; }
  std::size_t full_numel() const;
};

// Which member of a tensor-parallel group a layout is for. {0, 1}: no tensor parallelism.
struct TensorParallelShard {
  int rank = 0;
  int size = 1;
};

// A layer's tensors. GPT-2 family: qkvw/qkvb are c_attn (q, k and v fused), fcw/fcb c_fc. Llama
// family: qkvw/qkvb are q_proj, kw/kb and vw/vb k_proj and v_proj, gatew/gateb gate_proj (SwiGLU),
// fcw/fcb up_proj, fcprojw/fcprojb down_proj, attprojw/attprojb o_proj. npos: not in this config.
struct LayerOffsets {
  std::size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  std::size_t kw, kb, vw, vb, gatew, gateb;
};

class ParamLayout {
 public:
  // Throws std::invalid_argument for an impossible config, range or tp (heads % tp != 0).
  ParamLayout(const GptConfig& cfg, StageRange range, TensorParallelShard tp = {});

  const std::vector<ParamEntry>& entries() const { return entries_; }
  std::size_t total_floats() const { return total_; }
  const ParamEntry* find(const std::string& name) const;  // null when this stage lacks it
  const GptConfig& config() const { return cfg_; }
  const StageRange& range() const { return range_; }
  const TensorParallelShard& tp() const { return tp_; }

  // Vocabulary under tensor parallelism: the full padded size (cfg.padded_vocab_for_tp(tp)) and
  // the rows [vocab_begin, vocab_begin + vocab_local) of wte this rank holds.
  int padded_vocab() const { return vocab_padded_; }
  int vocab_begin() const { return vocab_begin_; }
  int vocab_local() const { return vocab_local_; }
  // Per-rank sizes: heads, and the widths of q/k/v (C/tp) and of the MLP hidden layer (4C/tp, or
  // the config's mlp_hidden()/tp); kv heads and the width of k and v (kv_heads * head size / tp).
  int local_heads() const { return cfg_.heads / tp_.size; }
  int local_attn_width() const { return cfg_.d_model / tp_.size; }
  int local_mlp_width() const { return cfg_.mlp_hidden() / tp_.size; }
  int local_kv_heads() const { return cfg_.n_kv_heads() / tp_.size; }
  int local_kv_width() const { return local_kv_heads() * cfg_.head_size(); }

  // Names of the family's top-level tensors: "wte" or "model.embed_tokens.weight", "lm_head.weight".
  std::string embedding_name() const;
  static constexpr const char* kHeadName = "lm_head.weight";
  // The token embedding when the head is tied to it and this stage holds it (the executor sums
  // its gradient over the two stages that hold a copy), else null.
  const ParamEntry* tied_embedding() const;
  // The tensors with a row per padded vocabulary entry (the embedding, an untied head): their
  // padding differs between tp degrees (GptConfig::padded_vocab_for_tp).
  bool is_vocab_table(const std::string& name) const { return name == embedding_name() || name == kHeadName; }

  // Offsets for the hot path; npos where this stage does not hold the tensor. head is the LM
  // head's weight: wte when tied, lm_head.weight otherwise.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t wte = npos, wpe = npos, lnfw = npos, lnfb = npos, head = npos;
  std::vector<LayerOffsets> layers;  // index 0 is range.first_layer

 private:
  void add_gpt2_family();
  void add_llama_family();
  static LayerOffsets no_offsets();
  std::size_t add(std::string name, std::vector<std::int64_t> full_shape, int shard_dim,
                  int shard_blocks, bool decay, float std, float value = 0.f);
  GptConfig cfg_;
  StageRange range_;
  TensorParallelShard tp_;
  int vocab_padded_ = 0, vocab_begin_ = 0, vocab_local_ = 0;
  std::vector<ParamEntry> entries_;
  std::size_t total_ = 0;
};

// std::invalid_argument naming the first inconsistency unless `e` describes a real slice: shape and
// full_shape of the same rank with dimensions >= 1, numel their product, the split dimension a
// 1/tp piece of every one of shard_blocks blocks and the others whole. slice_from_full,
// place_into_full and gather_full_tensor check their entries with it (entries can come from files).
void check_param_entry(const ParamEntry& e);
// Index (row-major) in the full tensor of element `local_index` of this rank's tensor.
std::size_t full_index_of(const ParamEntry& e, std::size_t local_index);
// Index in this rank's tensor of element `full_index` of the full tensor; ParamLayout::npos when
// that element lives on another rank.
std::size_t local_index_of(const ParamEntry& e, std::size_t full_index);
// shard[e.numel] = this rank's slice of full[e.full_numel()].
void slice_from_full(const ParamEntry& e, const float* full, float* shard);
// Writes this rank's slice into its place in full[e.full_numel()], leaving the rest untouched.
void place_into_full(const ParamEntry& e, const float* shard, float* full);
// Reassembles full[entries[0]->full_numel()] from the same-named entry of every rank of a tp
// group: entries[r] and shards[r] (its data) from rank r. Replicated tensors are copied from rank
// 0. Throws std::invalid_argument when the entries do not form one complete group.
void gather_full_tensor(const std::vector<const ParamEntry*>& entries,
                        const std::vector<const float*>& shards, float* full);

}  // namespace pipelane
