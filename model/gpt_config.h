// The shape of a model of the GPT-2 or Llama family and which slice of it one pipeline stage holds.
// `arch` picks the family, i.e. the parameter names (Hugging Face's GPT2LMHeadModel or
// LlamaForCausalLM) and the defaults of the orthogonal keys after it (norm, position, mlp,
// kv_heads, tie_embeddings, bias); apply_arch_defaults() sets those defaults, and problem() says
// which combinations are refused.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipelane {

enum class ModelArch { Gpt2, Llama };
enum class NormKind { LayerNorm, RmsNorm };
enum class PositionKind { Learned, Rope };
enum class MlpKind { Gelu, SwiGlu };
// Which linear layers have a bias: all (GPT-2), none (Llama), or only q, k and v (Qwen2).
enum class BiasKind { All, None, Qkv };

const char* arch_name(ModelArch a);  // "gpt2", "llama"
const char* norm_name(NormKind n);   // "layernorm", "rmsnorm"
const char* position_name(PositionKind p);  // "learned", "rope"
const char* mlp_name(MlpKind m);     // "gelu", "swiglu"
const char* bias_name(BiasKind b);   // "all", "none", "qkv"

// Llama 3.1's RoPE frequency scaling (Hugging Face's rope_type "llama3"): wavelengths shorter
// than original_context / high_freq_factor keep their frequency, longer than original_context /
// low_freq_factor are divided by factor, and those between are interpolated. factor == 0: none.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_context = 8192;
  bool enabled() const { return factor > 0; }
  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

// Meta's Llama MLP width rule: 2/3 of 4 * d_model, times ffn_dim_multiplier (0: none), rounded
// up to a multiple of multiple_of (Llama 3 8B: d_model 4096, 1.3, 1024 -> 14336).
int llama_ffn_hidden(int d_model, int multiple_of, double ffn_dim_multiplier);

struct GptConfig {
  int layers = 4;
  int d_model = 128;
  int heads = 4;
  int max_seq_len = 128;  // rows of the learned position table
  int vocab_size = 256;   // real tokens; the tables are padded (padded_vocab)
  // The family and its orthogonal keys; the defaults are GPT-2's (apply_arch_defaults).
  ModelArch arch = ModelArch::Gpt2;
  NormKind norm = NormKind::LayerNorm;
  float norm_eps = 1e-5f;  // rmsnorm's; layernorm's is always 1e-5
  PositionKind position = PositionKind::Learned;
  double rope_theta = 10000;
  RopeScaling rope_scaling{};
  MlpKind mlp = MlpKind::Gelu;
  int ffn_hidden = 0;  // MLP hidden width; 0: 4 * d_model (gelu) or llama_ffn_hidden(d_model, 256, 0) (swiglu)
  int kv_heads = 0;    // key/value heads (grouped-query attention); 0: heads
  bool tie_embeddings = true;  // the head is the token embedding (else its own lm_head.weight)
  BiasKind bias = BiasKind::All;

  // Sets norm, norm_eps, position, rope_theta, mlp, ffn_hidden, kv_heads, tie_embeddings and
  // bias to `a`'s defaults: GPT-2's (layernorm, learned, gelu, tied, all biases) or Llama 3's
  // (rmsnorm 1e-5, rope 500000, swiglu with Meta's width rule, untied, no biases).
  void apply_arch_defaults(ModelArch a);
  // True when every family key has GPT-2's value: the model pipelane trained before the keys
  // existed (checkpoints of such a model record none of them).
  bool is_plain_gpt2() const;
  // The family keys as [model] key = value text, resolved (ffn_hidden and kv_heads as numbers,
  // the rope_* scaling keys only under rope_scaling = llama3), in the option table's order: what
  // a checkpoint records and what two models are compared by.
  std::vector<std::pair<std::string, std::string>> family_settings() const;
  // Sets one family key from its text as family_settings() writes it; returns why it cannot
  // ("expected one of gpt2 llama"), "" when set. Keys it does not know are an error too.
  std::string set_family_key(const std::string& key, const std::string& text);

  static constexpr int kVocabPadding = 64;
  // Rounded in 64 bits: vocab_size near INT_MAX must not overflow before problem() can say so.
  std::int64_t padded_vocab_64() const {
    return (std::int64_t{vocab_size} + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
  }
  int padded_vocab() const { return static_cast<int>(padded_vocab_64()); }
  // The padded vocabulary under tensor parallelism of degree tp: padded_vocab() when tp divides
  // it (always for power-of-two tp <= 64, so the full wte has the same shape for any such tp and
  // checkpoints move between tp degrees unchanged), else the next multiple of 64 * tp.
  int padded_vocab_for_tp(int tp) const {
    const int vp = padded_vocab();
    if (tp <= 1 || vp % tp == 0) return vp;
    const std::int64_t m = std::int64_t{kVocabPadding} * tp;
    return static_cast<int>((vocab_size + m - 1) / m * m);
  }
  int head_size() const { return d_model / heads; }
  int n_kv_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int mlp_hidden() const;  // ffn_hidden resolved
  bool has_learned_positions() const { return position == PositionKind::Learned; }
  bool norm_has_bias() const { return norm == NormKind::LayerNorm; }
  bool qkv_bias() const { return bias != BiasKind::None; }
  bool linear_bias() const { return bias == BiasKind::All; }  // attention output and MLP biases
  // Separate q/k/v (and gate/up) projections, Llama's names; GPT-2 fuses q, k and v in c_attn.
  bool split_projections() const { return arch == ModelArch::Llama; }
  // Empty when valid, else what is wrong ("heads (5) does not divide d_model (128)"). Valid also
  // means every size the model code keeps in an int fits one (4 * d_model, the padded vocabulary
  // for any tp up to heads); whether the model fits in memory is memory_problem's question.
  std::string problem() const;
  // The family keys' part of problem(): a refused combination (GQA or SwiGLU under GPT-2's
  // names, RoPE on an odd head size, an epsilon layernorm does not take, ...), one line whose
  // first word is the [model] key to change.
  std::string family_problem() const;
  // Parameters excluding the embedding tables (wte, wpe) and an untied head. Needs a valid config
  // whose total_params() is known.
  std::int64_t non_embedding_params() const;
  // The weight matrices of one layer (q, k, v, the output projection, the MLP's two or three):
  // a token's forward costs twice this in FLOPs. GPT-2: 12 d_model^2.
  double layer_matrix_params() const;
  // Every parameter of the whole model (padded wte, wpe, the layers, the final norm, an untied
  // head, padded like wte) counted in
  // overflow-checked 64-bit arithmetic; nullopt when the count does not fit in 64 bits.
  std::optional<std::uint64_t> total_params() const;
  // Why the model cannot be trained in `bytes_per_rank` on each of `ranks` ranks that split it:
  // its parameters, gradients and AdamW moments (16 bytes per parameter, the least training
  // holds) do not fit. nullopt when they fit. Any non-negative sizes (it runs before problem()
  // so that an oversized vocabulary is reported by the memory it needs).
  struct SizeProblem {
    std::string key;      // the [model] key that makes it large: d_model, layers, vocab_size or seq_len
    std::string message;  // "layers = 1000000 (layers 1000000, d_model 128, vocab_size 256) needs
                          // 2.9 TiB for ..., more than 23.5 GiB per rank"
  };
  std::optional<SizeProblem> memory_problem(std::uint64_t bytes_per_rank, int ranks) const;
  // Training FLOPs per token: 6 * (non-embedding params + d_model * padded_vocab) for the matmuls
  // (the LM head runs once, tied or not; SwiGLU's three matrices and GQA's narrower k/v are in the
  // non-embedding count) + 12 * layers * d_model * T for attention (every query head attends).
  double train_flops_per_token(int seq_len) const;
};

// Layers [first_layer, last_layer) plus, optionally, the embedding (first stage) and the final
// norm + head + loss (last stage). The whole model is {0, layers, true, true}.
struct StageRange {
  int first_layer = 0;
  int last_layer = 0;
  bool has_embedding = true;
  bool has_head = true;
  static StageRange whole(const GptConfig& c) { return {0, c.layers, true, true}; }
  int num_layers() const { return last_layer - first_layer; }
};

}  // namespace pipelane
