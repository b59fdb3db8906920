#include "trainer/checkpoint/model_json.h"

#include <charconv>
#include <stdexcept>

#include "trainer/checkpoint/checkpoint_json.h"

namespace pipelane {

namespace {

constexpr std::int64_t kMaxModelSide = 1 << 24;

// A family value as JSON: numbers and booleans typed, names as strings.
nlohmann::json typed(const std::string& text) {
  if (text == "true" || text == "false") return text == "true";
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec == std::errc() && r.ptr == text.data() + text.size()) {
    if (text.find_first_of(".eE") == std::string::npos) return static_cast<std::int64_t>(v);
    return v;
  }
  return text;
}

// ... and back to the text GptConfig::set_family_key reads.
std::string text_of(const nlohmann::json& v, const std::string& key) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) {
    char text[40];
    const auto r = std::to_chars(text, text + sizeof text, v.get<double>());
    return std::string(text, r.ptr);
  }
  throw std::out_of_range("'" + key + "' = " + brief(v) + " is not a value of that key");
}

}  // namespace

nlohmann::json model_to_json(const GptConfig& c) {
  nlohmann::json m = {{"layers", c.layers}, {"d_model", c.d_model}, {"heads", c.heads},
                      {"max_seq_len", c.max_seq_len}, {"vocab_size", c.vocab_size}};
  if (!c.is_plain_gpt2())
    for (const auto& [key, text] : c.family_settings()) m[key] = typed(text);
  return m;
}

GptConfig model_from_json(const nlohmann::json& m) {
  GptConfig c;
  c.layers = static_cast<int>(json_integer(m, "layers", 1, kMaxModelSide));
  c.d_model = static_cast<int>(json_integer(m, "d_model", 1, kMaxModelSide));
  c.heads = static_cast<int>(json_integer(m, "heads", 1, kMaxModelSide));
  c.max_seq_len = static_cast<int>(json_integer(m, "max_seq_len", 1, kMaxModelSide));
  c.vocab_size = static_cast<int>(json_integer(m, "vocab_size", 2, kMaxModelSide));
  if (m.contains("arch")) {
    // In family_settings' order, so rope_scaling comes before its factors.
    GptConfig keys;
    keys.apply_arch_defaults(ModelArch::Llama);
    keys.rope_scaling.factor = 8;
    for (const auto& [key, unused] : keys.family_settings()) {
      (void)unused;
      if (!m.contains(key)) continue;
      if (const std::string why = c.set_family_key(key, text_of(m.at(key), key)); !why.empty())
        throw std::out_of_range("'" + key + "' = " + brief(m.at(key)) + ": " + why);
    }
  }
  if (const std::string p = c.problem(); !p.empty()) throw std::out_of_range("model: " + p);
  return c;
}

std::optional<ModelDifference> model_difference(const GptConfig& saved, const GptConfig& expected) {
  const std::pair<const char*, std::pair<int, int>> sizes[] = {
      {"layers", {saved.layers, expected.layers}},      {"d_model", {saved.d_model, expected.d_model}},
      {"heads", {saved.heads, expected.heads}},         {"seq_len", {saved.max_seq_len, expected.max_seq_len}},
      {"vocab_size", {saved.vocab_size, expected.vocab_size}}};
  for (const auto& [key, v] : sizes)
    if (v.first != v.second) return ModelDifference{key, std::to_string(v.first), std::to_string(v.second)};
  const auto a = saved.family_settings(), b = expected.family_settings();
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i] != b[i]) return ModelDifference{a[i].first, a[i].second, a[i].first == b[i].first ? b[i].second : "?"};
  if (a.size() != b.size()) return ModelDifference{"rope_scaling", a.size() > b.size() ? "llama3" : "none",
                                                   a.size() > b.size() ? "none" : "llama3"};
  return std::nullopt;
}

}  // namespace pipelane
