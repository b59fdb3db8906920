#include "model/gpt_config.h"

#include <charconv>
#include <climits>
#include <cstdio>

namespace pipelane {
namespace {

// Overflow-checked a * b + c on 64-bit counts; nullopt on overflow.
std::optional<std::uint64_t> multiply_add(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  std::uint64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return std::nullopt;
  return sum;
}

// Parameters of one transformer block (norms, attention, MLP, biases); nullopt on overflow.
// GPT-2: 2C + (3C^2 + 3C) + (C^2 + C) + 2C + (4C^2 + 4C) + (4C^2 + C) = 12 C^2 + 13 C.
std::optional<std::uint64_t> params_per_layer(const GptConfig& g) {
  if (g.d_model < 0 || g.heads < 1 || g.n_kv_heads() < 0 || g.mlp_hidden() < 0) return std::nullopt;
  const std::uint64_t C = static_cast<std::uint64_t>(g.d_model);
  const std::uint64_t hs = g.heads > 0 ? C / static_cast<std::uint64_t>(g.heads) : 0;
  const std::uint64_t qw = hs * static_cast<std::uint64_t>(g.heads);
  const std::uint64_t kvw = hs * static_cast<std::uint64_t>(g.n_kv_heads());
  const std::uint64_t F = static_cast<std::uint64_t>(g.mlp_hidden());
  const std::uint64_t norm = g.norm_has_bias() ? 2 * C : C;
  const std::uint64_t mlp_in = g.mlp == MlpKind::SwiGlu ? 2 : 1;  // gate and up, or c_fc
  std::uint64_t biases = (g.qkv_bias() ? qw + 2 * kvw : 0) + (g.linear_bias() ? C + mlp_in * F + C : 0);
  // Matrices: q, k, v, the output projection, the MLP's input(s) and output.
  const auto qkv = multiply_add(C, qw + 2 * kvw);
  const auto out = qkv ? multiply_add(qw, C, *qkv) : std::nullopt;
  const auto mlp = out ? multiply_add(C, (mlp_in + 1) * F, *out) : std::nullopt;
  return mlp ? multiply_add(1, *mlp, 2 * norm + biases) : std::nullopt;
}

std::string human_bytes(long double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 8) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0Lf %s" : "%.1Lf %s", bytes, units[unit]);
  return text;
}

std::string int_text(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

const char* arch_name(ModelArch a) { return a == ModelArch::Llama ? "llama" : "gpt2"; }
const char* norm_name(NormKind n) { return n == NormKind::RmsNorm ? "rmsnorm" : "layernorm"; }
const char* position_name(PositionKind p) { return p == PositionKind::Rope ? "rope" : "learned"; }
const char* mlp_name(MlpKind m) { return m == MlpKind::SwiGlu ? "swiglu" : "gelu"; }
const char* bias_name(BiasKind b) { return b == BiasKind::None ? "none" : b == BiasKind::Qkv ? "qkv" : "all"; }

int llama_ffn_hidden(int d_model, int multiple_of, double ffn_dim_multiplier) {
  // Meta's llama/model.py: hidden = int(2 * (4 * dim) / 3); int(multiplier * hidden); round up.
  std::int64_t hidden = 2 * (4 * std::int64_t{d_model}) / 3;
  if (ffn_dim_multiplier > 0) hidden = static_cast<std::int64_t>(ffn_dim_multiplier * static_cast<double>(hidden));
  const std::int64_t m = multiple_of > 0 ? multiple_of : 1;
  hidden = (hidden + m - 1) / m * m;
  return hidden > INT_MAX ? INT_MAX : static_cast<int>(hidden);
}

void GptConfig::apply_arch_defaults(ModelArch a) {
  arch = a;
  const bool llama = a == ModelArch::Llama;
  norm = llama ? NormKind::RmsNorm : NormKind::LayerNorm;
  norm_eps = 1e-5f;
  position = llama ? PositionKind::Rope : PositionKind::Learned;
  rope_theta = llama ? 500000 : 10000;  // Llama 3's base; GPT-2 has no RoPE (the value is unused)
  rope_scaling = {};
  mlp = llama ? MlpKind::SwiGlu : MlpKind::Gelu;
  ffn_hidden = 0;
  kv_heads = 0;
  tie_embeddings = !llama;
  bias = llama ? BiasKind::None : BiasKind::All;
}

bool GptConfig::is_plain_gpt2() const {
  GptConfig plain = *this;
  plain.apply_arch_defaults(ModelArch::Gpt2);
  return arch == plain.arch && norm == plain.norm && norm_eps == plain.norm_eps && position == plain.position &&
         rope_theta == plain.rope_theta && rope_scaling == plain.rope_scaling && mlp == plain.mlp &&
         mlp_hidden() == 4 * d_model && n_kv_heads() == heads && tie_embeddings && bias == plain.bias;
}

namespace {
template <class Number>
std::string shortest(Number v) {
  char text[40];
  const auto r = std::to_chars(text, text + sizeof text, v);
  return std::string(text, r.ptr);
}
}  // namespace

std::vector<std::pair<std::string, std::string>> GptConfig::family_settings() const {
  std::vector<std::pair<std::string, std::string>> out = {
      {"arch", arch_name(arch)},       {"norm", norm_name(norm)},
      {"norm_eps", shortest(norm_eps)}, {"position", position_name(position)},
      {"rope_theta", shortest(rope_theta)},
      {"rope_scaling", rope_scaling.enabled() ? "llama3" : "none"}};
  if (rope_scaling.enabled()) {
    out.push_back({"rope_factor", shortest(rope_scaling.factor)});
    out.push_back({"rope_low_freq_factor", shortest(rope_scaling.low_freq_factor)});
    out.push_back({"rope_high_freq_factor", shortest(rope_scaling.high_freq_factor)});
    out.push_back({"rope_original_context", std::to_string(rope_scaling.original_context)});
  }
  out.push_back({"mlp", mlp_name(mlp)});
  out.push_back({"ffn_hidden", std::to_string(mlp_hidden())});
  out.push_back({"kv_heads", std::to_string(n_kv_heads())});
  out.push_back({"tie_embeddings", tie_embeddings ? "true" : "false"});
  out.push_back({"bias", bias_name(bias)});
  return out;
}

std::string GptConfig::set_family_key(const std::string& key, const std::string& text) {
  const auto number = [&](double& out) -> std::string {
    double v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size() || text.empty() || !(v == v) || v - v != 0)
      return "expected a finite number";
    out = v;
    return "";
  };
  const auto integer = [&](int& out) -> std::string {
    int v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size() || text.empty()) return "expected an integer";
    out = v;
    return "";
  };
  const auto choice = [&](auto& out, std::initializer_list<std::pair<const char*, std::decay_t<decltype(out)>>> options) {
    std::string all = "expected one of";
    for (const auto& [name, value] : options) {
      if (text == name) return (out = value, std::string());
      all += std::string(" ") + name;
    }
    return all;
  };
  double d = 0;
  std::string e;
  if (key == "arch") return choice(arch, {{"gpt2", ModelArch::Gpt2}, {"llama", ModelArch::Llama}});
  if (key == "norm") return choice(norm, {{"layernorm", NormKind::LayerNorm}, {"rmsnorm", NormKind::RmsNorm}});
  if (key == "position") return choice(position, {{"learned", PositionKind::Learned}, {"rope", PositionKind::Rope}});
  if (key == "mlp") return choice(mlp, {{"gelu", MlpKind::Gelu}, {"swiglu", MlpKind::SwiGlu}});
  if (key == "bias") return choice(bias, {{"all", BiasKind::All}, {"none", BiasKind::None}, {"qkv", BiasKind::Qkv}});
  if (key == "tie_embeddings") return choice(tie_embeddings, {{"true", true}, {"false", false}});
  if (key == "rope_scaling") {
    bool on = false;
    e = choice(on, {{"none", false}, {"llama3", true}});
    if (e.empty()) rope_scaling = on ? RopeScaling{8, 1, 4, 8192} : RopeScaling{};
    return e;
  }
  if (key == "norm_eps") return (e = number(d)).empty() ? (norm_eps = static_cast<float>(d), e) : e;
  if (key == "rope_theta") return number(rope_theta);
  if (key == "rope_factor") return number(rope_scaling.factor);
  if (key == "rope_low_freq_factor") return number(rope_scaling.low_freq_factor);
  if (key == "rope_high_freq_factor") return number(rope_scaling.high_freq_factor);
  if (key == "rope_original_context") return integer(rope_scaling.original_context);
  if (key == "ffn_hidden") return integer(ffn_hidden);
  if (key == "kv_heads") return integer(kv_heads);
  return "not a [model] family key";
}

int GptConfig::mlp_hidden() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (mlp == MlpKind::Gelu) return d_model > INT_MAX / 4 ? INT_MAX : 4 * d_model;
  return llama_ffn_hidden(d_model, 256, 0);
}

std::string GptConfig::problem() const {
  if (layers < 1) return "layers (" + std::to_string(layers) + ") must be >= 1";
  if (d_model < 1) return "d_model (" + std::to_string(d_model) + ") must be >= 1";
  if (heads < 1) return "heads (" + std::to_string(heads) + ") must be >= 1";
  if (d_model % heads != 0)
    return "heads (" + std::to_string(heads) + ") does not divide d_model (" +
           std::to_string(d_model) + ")";
  if (max_seq_len < 1) return "seq_len (" + std::to_string(max_seq_len) + ") must be >= 1";
  if (vocab_size < 2) return "vocab_size (" + std::to_string(vocab_size) + ") must be >= 2";
  // The MLP width 4 * d_model is an int in the model code.
  if (d_model > INT_MAX / 4)
    return "d_model (" + std::to_string(d_model) + ") must be <= " + std::to_string(INT_MAX / 4);
  // The padded vocabulary for tp up to heads (tp must divide heads) is an int too.
  const std::int64_t largest_padding = std::int64_t{kVocabPadding} * heads;
  if (vocab_size > INT_MAX - largest_padding)
    return "vocab_size (" + std::to_string(vocab_size) + ") must be <= " +
           std::to_string(INT_MAX - largest_padding) + " (padded to a multiple of 64 x tp, it must fit an int)";
  return family_problem();
}

// The combinations of the family keys that are refused, each named by its first key.
std::string GptConfig::family_problem() const {
  const std::string hs = std::to_string(d_model / heads);
  if (kv_heads < 0 || kv_heads > heads || heads % n_kv_heads() != 0)
    return "kv_heads (" + std::to_string(kv_heads) + ") must divide heads (" + std::to_string(heads) + ")";
  if (arch == ModelArch::Gpt2 && n_kv_heads() != heads)
    return "kv_heads (" + std::to_string(n_kv_heads()) + ") < heads (" + std::to_string(heads) +
           ") needs arch = llama: GPT-2's fused c_attn holds q, k and v in equal thirds";
  if (arch == ModelArch::Gpt2 && mlp == MlpKind::SwiGlu)
    return "mlp = swiglu needs arch = llama: GPT-2's MLP has no gate projection (c_fc, c_proj)";
  if (!(norm_eps > 0)) return "norm_eps (" + int_text(norm_eps) + ") must be > 0";
  if (norm == NormKind::LayerNorm && norm_eps != 1e-5f)
    return "norm_eps (" + int_text(norm_eps) + ") applies to rmsnorm only: layernorm's epsilon is 1e-5";
  if (position == PositionKind::Rope && (d_model / heads) % 2 != 0)
    return "position = rope rotates pairs of channels: the head size d_model / heads = " + hs + " must be even";
  if (!(rope_theta > 0)) return "rope_theta (" + int_text(rope_theta) + ") must be > 0";
  if (rope_scaling.enabled()) {
    if (position != PositionKind::Rope) return "rope_scaling needs position = rope";
    if (!(rope_scaling.factor >= 1)) return "rope_factor (" + int_text(rope_scaling.factor) + ") must be >= 1";
    if (!(rope_scaling.low_freq_factor > 0) || !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor))
      return "rope_low_freq_factor (" + int_text(rope_scaling.low_freq_factor) +
             ") must be > 0 and below rope_high_freq_factor (" + int_text(rope_scaling.high_freq_factor) + ")";
    if (rope_scaling.original_context < 1)
      return "rope_original_context (" + std::to_string(rope_scaling.original_context) + ") must be >= 1";
  }
  if (ffn_hidden < 0) return "ffn_hidden (" + std::to_string(ffn_hidden) + ") must be >= 0";
  if (mlp_hidden() > INT_MAX / 4)
    return "ffn_hidden (" + std::to_string(mlp_hidden()) + ") must be <= " + std::to_string(INT_MAX / 4);
  return {};
}

std::int64_t GptConfig::non_embedding_params() const {
  const std::int64_t C = d_model;
  const std::int64_t norm_params = norm_has_bias() ? 2 * C : C;
  return layers * static_cast<std::int64_t>(*params_per_layer(*this)) + norm_params;
}

double GptConfig::layer_matrix_params() const {
  const double C = d_model, hs = d_model / heads, qw = hs * heads, kvw = hs * n_kv_heads(), F = mlp_hidden();
  const double mlp_in = mlp == MlpKind::SwiGlu ? 2 : 1;
  return C * (qw + 2 * kvw) + qw * C + (mlp_in + 1) * C * F;
}

std::optional<std::uint64_t> GptConfig::total_params() const {
  if (layers < 0 || d_model < 0 || max_seq_len < 0 || vocab_size < 0) return std::nullopt;
  const std::uint64_t C = static_cast<std::uint64_t>(d_model);
  const auto per_layer = params_per_layer(*this);
  if (!per_layer) return std::nullopt;
  const auto blocks =
      multiply_add(*per_layer, static_cast<std::uint64_t>(layers), norm_has_bias() ? 2 * C : C);  // + final norm
  // wte (and an untied head, padded the same way), plus wpe for learned positions.
  const std::uint64_t vocab_rows = static_cast<std::uint64_t>(padded_vocab_64()) * (tie_embeddings ? 1 : 2);
  const std::uint64_t table_rows =
      vocab_rows + (has_learned_positions() ? static_cast<std::uint64_t>(max_seq_len) : 0);
  if (!blocks) return std::nullopt;
  return multiply_add(table_rows, C, *blocks);
}

std::optional<GptConfig::SizeProblem> GptConfig::memory_problem(std::uint64_t bytes_per_rank, int ranks) const {
  constexpr std::uint64_t kBytesPerParam = 16;  // fp32 parameter, gradient, AdamW m and v
  const std::uint64_t share = static_cast<std::uint64_t>(ranks < 1 ? 1 : ranks);
  const std::optional<std::uint64_t> params = total_params();
  const std::optional<std::uint64_t> bytes = params ? multiply_add(*params, kBytesPerParam) : std::nullopt;
  if (bytes && *bytes / share <= bytes_per_rank) return std::nullopt;

  // Name what makes the model large: its width when one layer alone does not fit, else the layers
  // or the embedding tables, whichever holds more parameters.
  const std::optional<std::uint64_t> per_layer = params_per_layer(*this);
  const long double layer_params = per_layer ? static_cast<long double>(*per_layer) : 12.0L * d_model * d_model;
  const long double all_layer_params = layer_params * layers;
  const long double table_params =
      (static_cast<long double>(padded_vocab_64()) * (tie_embeddings ? 1 : 2) +
       (has_learned_positions() ? max_seq_len : 0)) * d_model;
  const long double budget = static_cast<long double>(bytes_per_rank) * static_cast<long double>(share);
  std::string key = "d_model";
  int value = d_model;
  if (layer_params * kBytesPerParam <= budget) {
    if (all_layer_params >= table_params) key = "layers", value = layers;
    else if (padded_vocab_64() >= max_seq_len) key = "vocab_size", value = vocab_size;
    else key = "seq_len", value = max_seq_len;
  }
  const long double final_norm = (norm_has_bias() ? 2.0L : 1.0L) * d_model;
  const long double needed = (all_layer_params + table_params + final_norm) * kBytesPerParam;
  char count[64];
  std::snprintf(count, sizeof count, "%.3Lg", all_layer_params + table_params + final_norm);
  std::string message = key + " = " + std::to_string(value) + " (layers " + std::to_string(layers) + ", d_model " +
                        std::to_string(d_model) + ", vocab_size " + std::to_string(vocab_size) + ") needs " +
                        human_bytes(needed) + " for parameters, gradients and AdamW moments (" + count +
                        " parameters x 16 bytes)";
  if (share > 1) message += ", " + human_bytes(needed / share) + " on each of " + std::to_string(share) + " ranks";
  return SizeProblem{key, message + ", more than " + human_bytes(static_cast<long double>(bytes_per_rank)) +
                              " per rank"};
}

double GptConfig::train_flops_per_token(int seq_len) const {
  return 6.0 * (static_cast<double>(non_embedding_params()) +
                static_cast<double>(d_model) * padded_vocab()) +
         12.0 * layers * d_model * static_cast<double>(seq_len);
}

}  // namespace pipelane
