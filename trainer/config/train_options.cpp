#include "trainer/config/train_options.h"

#include "trainer/config/option_machinery.h"

namespace pipelane {

using namespace train_option_detail;

RunOptions::StepRange RunOptions::traced_steps() const {
  constexpr int kDefaultTracedSteps = 20;
  const std::string text = trim(trace_steps);
  if (text.empty()) return {0, 0, kDefaultTracedSteps};
  if (text == "none") return {0, 0, 0};
  const std::size_t dash = text.find('-');
  const std::optional<int> first = parse_integer<int>(trim(text.substr(0, dash)));
  const std::optional<int> last = dash == std::string::npos ? first : parse_integer<int>(trim(text.substr(dash + 1)));
  if (!first || !last || *first < 1 || *last < *first)
    throw ConfigError("expected a step range FIRST-LAST (1-based, FIRST <= LAST), one step, or none");
  return {*first, *last, *last - *first + 1};
}

std::vector<std::string> LanesOptions::enabled_lanes() const { return split_list(enabled); }
std::vector<std::string> LanesOptions::plugin_paths() const { return split_list(plugins); }
std::vector<std::string> LanesOptions::network_lanes() const { return split_list(network); }
bool LanesOptions::runs_on_stage(int stage) const {
  if (stages == "all") return true;
  for (const std::string& item : split_list(stages))
    if (parse_integer<int>(item) == stage) return true;
  return false;
}

TrainOptions parse_train_options(int argc, const char* const* argv) {
  const std::vector<OptionKey> keys = train_option_keys();
  const CommandLine command_line = read_command_line(argc, argv, keys);

  TrainOptions options;
  options.config_path = command_line.config_path.value_or("");
  if (command_line.help) {
    options.help_requested = true;
    return options;
  }

  Settings settings = command_line.config_path ? read_config_file(*command_line.config_path, keys) : Settings{};
  for (const auto& [name, setting] : command_line.settings) settings[name] = setting;

  for (const OptionKey& key : keys) {
    const auto found = settings.find(key.full_name());
    if (found == settings.end()) continue;
    if (const auto reason = key.assign(options, found->second.value)) {
      throw ConfigError(value_error(key, found->second, *reason));
    }
  }
  apply_arch_defaults(options.model, settings);
  check_combinations(options, settings);
  check_resources(options, settings);
  for (const auto& [name, setting] : settings) {  // "lane.NAME" markers and "lane.NAME.key" values
    if (!is_lane_section(name)) continue;
    const std::string rest = name.substr(kLaneSectionPrefix.size());
    const std::size_t dot = rest.find('.');
    std::map<std::string, std::string>& section = options.lanes.lane_sections[rest.substr(0, dot)];
    if (dot != std::string::npos) section[rest.substr(dot + 1)] = setting.value;
  }
  options.lanes.lane_sections_source = command_line.config_path.value_or("command line");
  check_lanes(options, settings);
  check_lanes_values(options, settings);
  options.notes = lane_section_notes(options.lanes, settings);
  return options;
}

std::string TrainOptions::to_ini() const {
  const std::vector<OptionKey> keys = train_option_keys();
  std::ostringstream ini;
  ini << "# pipelane train configuration: every key, as resolved\n";
  for (const std::string& section : section_names(keys)) {
    ini << "\n[" << section << "]\n";
    for (const OptionKey& key : keys) {
      if (key.section == section) ini << key.name << " = " << key.format(*this) << "\n";
    }
  }
  for (const auto& [name, values] : lanes.lane_sections) {
    ini << "\n[lane." << name << "]\n";
    for (const auto& [key, value] : values) ini << key << " = " << value << "\n";
  }
  return ini.str();
}

std::string train_options_help() {
  std::ostringstream help;
  help << "usage: pipelane train --config FILE [--section.key=value ...]\n"
          "Keys go in the config file as 'key = value' under [section], or on the command line as\n"
          "--section.key=value or --section.key value; the command line overrides the file.\n"
          "A [lane.NAME] section (or --lane.NAME.key=value) passes its keys to lane NAME (see lanes.enabled).\n"
       << command_line_description(train_option_keys());
  return help.str();
}

RecomputeOptions recompute_options_from(const TrainLoopOptions& t) {
  return {parse_recompute_kind(t.recompute), parse_recompute_method(t.recompute_method), t.recompute_layers};
}

int microbatches_per_replica(const TrainLoopOptions& t, int dp) {
  const int per_replica = t.micro_batch * dp;
  if (t.global_batch % per_replica != 0)
    throw ConfigError("[train] global_batch = " + std::to_string(t.global_batch) +
                      " is not a multiple of micro_batch x dp = " + std::to_string(per_replica));
  return t.global_batch / per_replica;
}

GptConfig gpt_config_from(const ModelOptions& m) {
  GptConfig c;
  c.layers = m.layers;
  c.d_model = m.d_model;
  c.heads = m.heads;
  c.max_seq_len = m.seq_len;
  c.vocab_size = m.vocab_size;
  c.apply_arch_defaults(m.arch == "llama" ? ModelArch::Llama : ModelArch::Gpt2);
  c.norm = m.norm == "rmsnorm" ? NormKind::RmsNorm : NormKind::LayerNorm;
  c.norm_eps = static_cast<float>(m.norm_eps);
  c.position = m.position == "rope" ? PositionKind::Rope : PositionKind::Learned;
  c.rope_theta = m.rope_theta;
  if (m.rope_scaling == "llama3")
    c.rope_scaling = {m.rope_factor, m.rope_low_freq_factor, m.rope_high_freq_factor, m.rope_original_context};
  c.mlp = m.mlp == "swiglu" ? MlpKind::SwiGlu : MlpKind::Gelu;
  c.ffn_hidden = m.ffn_hidden;
  if (c.ffn_hidden == 0 && c.mlp == MlpKind::SwiGlu && m.d_model > 0)
    c.ffn_hidden = llama_ffn_hidden(m.d_model, m.ffn_multiple_of, m.ffn_dim_multiplier);
  c.kv_heads = m.kv_heads;
  c.tie_embeddings = m.tie_embeddings;
  c.bias = m.bias == "none" ? BiasKind::None : m.bias == "qkv" ? BiasKind::Qkv : BiasKind::All;
  return c;
}

ModelOptions model_options_from(const GptConfig& c) {
  ModelOptions m;
  m.layers = c.layers;
  m.d_model = c.d_model;
  m.heads = c.heads;
  m.seq_len = c.max_seq_len;
  m.vocab_size = c.vocab_size;
  m.arch = arch_name(c.arch);
  m.norm = norm_name(c.norm);
  {  // the float's shortest decimal, so 1e-5f reads back as 1e-5, not 9.99999974738e-06
    char text[32];
    const auto end = std::to_chars(text, text + sizeof text, c.norm_eps).ptr;
    std::from_chars(text, end, m.norm_eps);
  }
  m.position = position_name(c.position);
  m.rope_theta = c.rope_theta;
  if (c.rope_scaling.enabled()) {
    m.rope_scaling = "llama3";
    m.rope_factor = c.rope_scaling.factor;
    m.rope_low_freq_factor = c.rope_scaling.low_freq_factor;
    m.rope_high_freq_factor = c.rope_scaling.high_freq_factor;
    m.rope_original_context = c.rope_scaling.original_context;
  }
  m.mlp = mlp_name(c.mlp);
  m.ffn_hidden = c.mlp == MlpKind::SwiGlu || c.ffn_hidden > 0 ? c.mlp_hidden() : 0;
  m.kv_heads = c.kv_heads;
  m.tie_embeddings = c.tie_embeddings;
  m.bias = bias_name(c.bias);
  return m;
}

}  // namespace pipelane
