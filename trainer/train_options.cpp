#include "trainer/train_options.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <unistd.h>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "datasets/data_error.h"
#include "datasets/sharded_sampler.h"
#include "model/gpt_config.h"
#include "trainer/ini_scan.h"

namespace po = boost::program_options;

namespace pipelane {
namespace {

// ---------------------------------------------------------------------------------------
// Value text <-> field conversion. Parsing is strict (the whole text must be consumed) so
// "12abc" or "1.5" for an integer is an error rather than a silent 12 or 1.

template <class Integer>
std::optional<Integer> parse_integer(std::string_view text) {
  Integer value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Shortest text that parses back to the same double, so to_ini() round-trips exactly.
std::string format_number(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// The accepted interval of a floating-point key, e.g. lr > 0 or beta1 in [0, 1).
struct NumberRange {
  double low = -std::numeric_limits<double>::infinity();
  bool low_inclusive = true;
  double high = std::numeric_limits<double>::infinity();
  bool high_inclusive = true;

  bool contains(double value) const {
    const bool above_low = low_inclusive ? value >= low : value > low;
    const bool below_high = high_inclusive ? value <= high : value < high;
    return above_low && below_high;
  }
  std::string describe() const {
    if (std::isinf(high)) return (low_inclusive ? ">= " : "> ") + format_number(low);
    return std::string("in ") + (low_inclusive ? "[" : "(") + format_number(low) + ", " +
           format_number(high) + (high_inclusive ? "]" : ")");
  }
};

NumberRange at_least(double low) { return {low, true}; }
NumberRange greater_than(double low) { return {low, false}; }
NumberRange from_up_to_excluding(double low, double high) { return {low, true, high, false}; }

// ---------------------------------------------------------------------------------------
// The key table: one OptionKey per configurable field. Help, to_ini(), file parsing and
// command-line parsing all walk this table, so they cannot disagree about the keys.

struct OptionKey {
  std::string section;      // "train"
  std::string name;         // "lr"
  std::string value_name;   // shown in --help: INT, NUM, TEXT or the choices
  std::string description;  // one line for --help
  std::function<std::string(const TrainOptions&)> format;
  // Stores the text into the field, or returns why it cannot ("expected an integer >= 1").
  std::function<std::optional<std::string>(TrainOptions&, std::string_view)> assign;

  std::string full_name() const { return section + "." + name; }
};

// Adds the keys of one section; each key is one chained call.
template <class Section>
class SectionKeys {
 public:
  SectionKeys(std::vector<OptionKey>& keys, std::string section, Section TrainOptions::*member)
      : keys_(keys), section_(std::move(section)), member_(member) {}

  SectionKeys& integer(std::string name, int Section::*field, int minimum, std::string description) {
    const auto member = member_;
    add(std::move(name), "INT", std::move(description),
        [member, field](const TrainOptions& options) { return std::to_string(options.*member.*field); },
        [member, field, minimum](TrainOptions& options, std::string_view text) -> std::optional<std::string> {
          const std::optional<int> value = parse_integer<int>(text);
          if (!value) return "expected an integer";
          if (*value < minimum) return "expected an integer >= " + std::to_string(minimum);
          options.*member.*field = *value;
          return std::nullopt;
        });
    return *this;
  }

  SectionKeys& unsigned_integer(std::string name, std::uint64_t Section::*field, std::string description) {
    const auto member = member_;
    add(std::move(name), "UINT", std::move(description),
        [member, field](const TrainOptions& options) { return std::to_string(options.*member.*field); },
        [member, field](TrainOptions& options, std::string_view text) -> std::optional<std::string> {
          const std::optional<std::uint64_t> value = parse_integer<std::uint64_t>(text);
          if (!value) return "expected a non-negative integer";
          options.*member.*field = *value;
          return std::nullopt;
        });
    return *this;
  }

  SectionKeys& number(std::string name, double Section::*field, NumberRange range, std::string description) {
    const auto member = member_;
    add(std::move(name), "NUM", std::move(description),
        [member, field](const TrainOptions& options) { return format_number(options.*member.*field); },
        [member, field, range](TrainOptions& options, std::string_view text) -> std::optional<std::string> {
          const std::optional<double> value = parse_number(text);
          if (!value) return "expected a number";
          if (!range.contains(*value)) return "expected a number " + range.describe();
          options.*member.*field = *value;
          return std::nullopt;
        });
    return *this;
  }

  // true/false (also on/off, 1/0); written back as true/false.
  SectionKeys& boolean(std::string name, bool Section::*field, std::string description) {
    const auto member = member_;
    add(std::move(name), "true|false", std::move(description),
        [member, field](const TrainOptions& options) { return std::string(options.*member.*field ? "true" : "false"); },
        [member, field](TrainOptions& options, std::string_view text) -> std::optional<std::string> {
          if (text == "true" || text == "on" || text == "1") options.*member.*field = true;
          else if (text == "false" || text == "off" || text == "0") options.*member.*field = false;
          else return "expected true or false";
          return std::nullopt;
        });
    return *this;
  }

  // choices empty: any text is accepted.
  SectionKeys& text(std::string name, std::string Section::*field, std::vector<std::string> choices,
                    std::string description) {
    const auto member = member_;
    std::string joined_choices;
    for (const std::string& choice : choices) joined_choices += (joined_choices.empty() ? "" : "|") + choice;
    add(std::move(name), choices.empty() ? "TEXT" : joined_choices, std::move(description),
        [member, field](const TrainOptions& options) { return options.*member.*field; },
        [member, field, choices](TrainOptions& options, std::string_view text) -> std::optional<std::string> {
          if (!choices.empty() && std::find(choices.begin(), choices.end(), text) == choices.end()) {
            std::string reason = "expected one of";
            for (const std::string& choice : choices) reason += " " + choice;
            return reason;
          }
          options.*member.*field = std::string(text);
          return std::nullopt;
        });
    return *this;
  }

 private:
  void add(std::string name, std::string value_name, std::string description,
           std::function<std::string(const TrainOptions&)> format,
           std::function<std::optional<std::string>(TrainOptions&, std::string_view)> assign) {
    keys_.push_back({section_, std::move(name), std::move(value_name), std::move(description),
                     std::move(format), std::move(assign)});
  }

  std::vector<OptionKey>& keys_;
  std::string section_;
  Section TrainOptions::*member_;
};

std::vector<OptionKey> train_option_keys() {
  std::vector<OptionKey> keys;
  SectionKeys<RuntimeOptions>(keys, "runtime", &TrainOptions::runtime)
      .text("backend", &RuntimeOptions::backend, {},
            "compute backend: cpu, cuda or cuda:N (`pipelane devices` lists what this machine has)");
  SectionKeys<ModelOptions>(keys, "model", &TrainOptions::model)
      .integer("layers", &ModelOptions::layers, 1, "number of transformer blocks")
      .integer("d_model", &ModelOptions::d_model, 1, "width of the residual stream")
      .integer("heads", &ModelOptions::heads, 1, "attention heads per block; must divide d_model")
      .integer("seq_len", &ModelOptions::seq_len, 1, "tokens per training sequence (context length)")
      .integer("vocab_size", &ModelOptions::vocab_size, 2, "rows of the token embedding")
      .text("attention", &ModelOptions::attention, {"cublas", "cudnn"},
            "causal attention on the CUDA backend: cublas (strided-batched cuBLASLt GEMMs and own softmax "
            "kernels; saves the probabilities [B,heads,T,T]) or cudnn (cuDNN's fused attention graphs; saves "
            "only the softmax statistics [B,heads,T]; needs backend = cuda)");
  SectionKeys<TrainLoopOptions>(keys, "train", &TrainOptions::train)
      .integer("micro_batch", &TrainLoopOptions::micro_batch, 1, "sequences per forward/backward pass")
      .integer("global_batch", &TrainLoopOptions::global_batch, 1,
               "sequences per optimizer step; a multiple of micro_batch")
      .integer("steps", &TrainLoopOptions::steps, 1, "optimizer steps to run")
      .number("lr", &TrainLoopOptions::lr, greater_than(0), "peak learning rate, reached after warmup")
      .number("min_lr", &TrainLoopOptions::min_lr, at_least(0), "learning rate at the end of the decay; <= lr")
      .integer("warmup_steps", &TrainLoopOptions::warmup_steps, 0, "steps of linear warmup to lr; <= steps")
      .number("weight_decay", &TrainLoopOptions::weight_decay, at_least(0), "AdamW decoupled weight decay")
      .number("grad_clip", &TrainLoopOptions::grad_clip, at_least(0),
              "clip the global gradient norm to this; 0 turns clipping off")
      .number("beta1", &TrainLoopOptions::beta1, from_up_to_excluding(0, 1), "AdamW first-moment decay")
      .number("beta2", &TrainLoopOptions::beta2, from_up_to_excluding(0, 1), "AdamW second-moment decay")
      .number("eps", &TrainLoopOptions::eps, greater_than(0), "AdamW denominator epsilon")
      .unsigned_integer("seed", &TrainLoopOptions::seed, "seed for initialization and data order")
      .integer("eval_every", &TrainLoopOptions::eval_every, 0, "steps between evaluations; 0 turns them off")
      .integer("eval_batches", &TrainLoopOptions::eval_batches, 1, "batches per evaluation")
      .integer("threads", &TrainLoopOptions::threads, 0, "CPU threads; 0 uses all cores")
      .number("peak_gflops", &TrainLoopOptions::peak_gflops, at_least(0),
              "peak GFLOP/s of one rank for MFU; 0: the hardware's (cores x clock x FLOPs per cycle)")
      .integer("max_bad_steps", &TrainLoopOptions::max_bad_steps, 1,
               "NaN/Inf (or loss-spike) steps in a row that are skipped before the run stops")
      .number("loss_spike_zscore", &TrainLoopOptions::loss_spike_zscore, at_least(0),
              "skip a step whose loss z-score against recent steps exceeds this; 0 turns it off")
      .integer("sample_every", &TrainLoopOptions::sample_every, 0,
               "steps between text samples, printed and appended to <dir>/samples.jsonl; 0 turns them off")
      .integer("sample_tokens", &TrainLoopOptions::sample_tokens, 1, "tokens per sample")
      .text("sample_prompt", &TrainLoopOptions::sample_prompt, {},
            "text the samples continue; empty: <|endoftext|> (gpt2) or a newline (byte)")
      .text("precision", &TrainLoopOptions::precision, {"fp32", "bf16"},
            "fp32, or bf16 as PyTorch's autocast: the GEMMs (linear layers, attention's two products, "
            "the LM head) read bf16-rounded operands and accumulate in fp32; weights (fp32 masters), "
            "gradients, AdamW state, activations, losses and norms stay fp32, so activation memory is "
            "not halved (cpu: an emulation, the reference for cuda)");
  SectionKeys<DataOptions>(keys, "data", &TrainOptions::data)
      .text("path", &DataOptions::path, {}, "training data: HDF5 token store, Megatron X.bin/X.idx or llm.c .bin shard")
      .text("tokenizer", &DataOptions::tokenizer, {"byte", "gpt2"}, "how the data was tokenized")
      .text("sample_mode", &DataOptions::sample_mode, {"cross-documents", "within-documents"},
            "training samples of seq_len+1 tokens span document boundaries (Megatron) or stay inside one")
      .text("blend", &DataOptions::blend, {},
            "train on several token files by weight, e.g. a.h5:0.7,b.h5:0.3 (Megatron's blending rule); "
            "validation stays on path's validation split. Empty: train on path");
  SectionKeys<ParallelOptions>(keys, "parallel", &TrainOptions::parallel)
      .integer("tp", &ParallelOptions::tp, 1, "tensor-parallel ranks (heads, MLP and vocabulary split)")
      .integer("pp", &ParallelOptions::pp, 1, "pipeline stages")
      .integer("dp", &ParallelOptions::dp, 0, "data-parallel replicas; 0: world size / (tp * pp)")
      .text("schedule", &ParallelOptions::schedule, {"gpipe", "1f1b", "interleaved", "zb-h1"},
            "pipeline schedule")
      .integer("virtual_stages", &ParallelOptions::virtual_stages, 1,
               "model chunks per stage (interleaved only; microbatches must be a multiple of pp)")
      .text("layers_per_stage", &ParallelOptions::layers_per_stage, {},
            "layers of each virtual stage, comma-separated; empty splits evenly");
  SectionKeys<RunOptions>(keys, "run", &TrainOptions::run)
      .text("dir", &RunOptions::dir, {}, "directory for logs, checkpoints and the resolved config")
      .integer("log_every", &RunOptions::log_every, 1, "steps between log lines")
      .integer("checkpoint_every", &RunOptions::checkpoint_every, 0,
               "steps between checkpoints in <dir>/checkpoints; 0 turns them off")
      .integer("keep_last", &RunOptions::keep_last, 1, "complete checkpoints to keep")
      .text("resume", &RunOptions::resume, {},
            "auto: newest checkpoint in <dir>/checkpoints (stops if it is damaged); auto-skip-damaged: "
            "newest intact one, damaged ones moved aside; none: a fresh start; or a checkpoint directory")
      .text("overwrite", &RunOptions::overwrite, {"refuse", "archive"},
            "when checkpoints in <dir> are in the way of resume = none or a PATH: refuse to start, or "
            "archive them (with an earlier run's metrics) into <dir>/archive/<UTC time>/")
      .number("timeout_s", &RunOptions::timeout_s, greater_than(0),
              "a rank that makes no progress this long (a stopped or lost rank, a hung transfer) ends "
              "the job with one line naming what it waited for")
      .text("init_from", &RunOptions::init_from, {},
            "a fresh run starts from these weights (checkpoint at any grid, or a Hugging Face GPT-2 directory); "
            "a run that resumes ignores it")
      .text("trace_steps", &RunOptions::trace_steps, {},
            "steps recorded in trace.json, e.g. 100-120, or none; empty: the first 20 steps the run executes");
  SectionKeys<LanesOptions>(keys, "lanes", &TrainOptions::lanes)
      .text("enabled", &LanesOptions::enabled, {}, "lanes run in pipeline bubbles, comma-separated; empty: off")
      .integer("memory_mb", &LanesOptions::memory_mb, 1, "arena quota of each lane (MiB)")
      .integer("stage_memory_mb", &LanesOptions::stage_memory_mb, 1, "cap on all lanes of one stage (MiB)")
      .number("margin", &LanesOptions::margin, {0, false, 1, true}, "share of a predicted gap lane steps may fill")
      .boolean("deterministic", &LanesOptions::deterministic, "freeze the lane steps of each gap after profiling")
      .integer("profile_iterations", &LanesOptions::profile_iterations, 1, "first iterations only measure gaps")
      .text("stages", &LanesOptions::stages, {}, "pipeline stages that run lanes: all, or a list such as 0,2")
      .text("plugins", &LanesOptions::plugins, {}, "lane plugins (.so paths), comma-separated")
      .text("isolation", &LanesOptions::isolation, {"auto", "process", "thread"},
            "where lanes run: process (a worker process per lane: a crash, hang or leak cannot reach "
            "training), thread (in-process, unisolated: trusted code only), or auto (plugins and the "
            "command lane in processes, other built-ins in-process)")
      .integer("output_mb", &LanesOptions::output_mb, 1, "disk quota of each lane's output directory (MiB)")
      .text("baseline", &LanesOptions::baseline, {},
            "summary.json of a lanes-off run of this config: summary.json then reports the training overhead")
      .text("dedicated", &LanesOptions::dedicated, {},
            "file of `pipelane lane-bench NAME --json` lines, one per enabled lane: summary.json then "
            "reports the FreeRide-style cost saving")
      .text("plan", &LanesOptions::plan, {},
            "summary.json of a deterministic run of this config: run exactly its lane plan (implies deterministic)")
      .integer("sm_partition", &LanesOptions::sm_partition, 0,
               "CUDA: run lane streams in a green context of this many SMs (rounded up by the driver), "
               "leaving the rest to training; 0: lanes share every SM at the lowest stream priority")
      .number("train_price_per_hour", &LanesOptions::train_price_per_hour, at_least(0),
              "price of one training device per hour, for the cost saving; 0: not given")
      .number("dedicated_price_per_hour", &LanesOptions::dedicated_price_per_hour, at_least(0),
              "price per hour of the dedicated device lane work is valued on; 0: the training device's");
  SectionKeys<WanOptions>(keys, "wan", &TrainOptions::wan)
      .text("cluster", &WanOptions::cluster, {},
            "cluster file naming the sites (data centres) the ranks run in and the links between them "
            "(configs/clusters/README.md); pipeline stages are placed across the sites, tensor and data "
            "parallelism inside them. Empty: one site")
      .text("sharing", &WanOptions::sharing, {"off", "concurrent", "temporal"},
            "cross-site transfers: off (as any other), concurrent (the pipelines sharing a link send at "
            "once: the naive baseline) or temporal (they send in turn, each message with the link to itself)")
      .integer("connections", &WanOptions::connections, 0,
               "parallel connections a cross-site message is split over; 0: the inter-site link's connections")
      .text("placement", &WanOptions::placement, {"stages", "replicas"},
            "stages: pipeline stages across sites (tensor and data parallelism inside); replicas: whole "
            "pipelines per site, data parallelism across (a baseline: pipelane simulate only)")
      .boolean("force", &WanOptions::force, "run even with a tensor-parallel group across sites (warned)");
  return keys;
}

// Sections in table order, each once.
std::vector<std::string> section_names(const std::vector<OptionKey>& keys) {
  std::vector<std::string> sections;
  for (const OptionKey& key : keys) {
    if (std::find(sections.begin(), sections.end(), key.section) == sections.end()) sections.push_back(key.section);
  }
  return sections;
}

// ---------------------------------------------------------------------------------------
// "Did you mean" suggestions.

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

// Only close matches: a suggestion for a completely different word is noise.
std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates) {
  constexpr std::size_t kMaxDistance = 2;
  std::optional<std::string> best;
  std::size_t best_distance = kMaxDistance + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance && distance < word.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------
// Settings: the raw text of each key that was given, and where it came from.

struct Setting {
  std::string value;
  std::string location;  // "configs/tiny.ini:7" or "command line"
  bool from_command_line = false;
};
using Settings = std::map<std::string, Setting>;  // by "section.key"

std::string value_error(const OptionKey& key, const Setting& setting, const std::string& reason) {
  if (setting.from_command_line)
    return "command line: --" + key.full_name() + "=" + printable(setting.value) + ": " + reason;
  return setting.location + ": [" + key.section + "] " + key.name + " = '" + printable(setting.value) + "': " + reason;
}

// [lane.NAME] sections are not in the key table: their keys belong to lane NAME. They travel in
// Settings as "lane.NAME.key", plus a "lane.NAME" marker locating the section header.
constexpr std::string_view kLaneSectionPrefix = "lane.";

bool is_lane_section(std::string_view section) { return section.substr(0, kLaneSectionPrefix.size()) == kLaneSectionPrefix; }

bool valid_lane_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::string trim(std::string_view text) {
  const std::size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  return std::string(text.substr(begin, text.find_last_not_of(" \t") - begin + 1));
}

// "a, b,c" -> {"a", "b", "c"}; "" -> {}; an empty item ("a,,b") is kept as "" for the caller to reject.
std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> items;
  if (trim(text).empty()) return items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    items.push_back(trim(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

Settings read_config_file(const std::string& path, const std::vector<OptionKey>& keys) {
  std::error_code filesystem_error;
  if (!std::filesystem::exists(path, filesystem_error)) throw ConfigError(path + ": no such config file");
  std::ifstream file(path);
  if (!file || std::filesystem::is_directory(path, filesystem_error)) {
    throw ConfigError(path + ": cannot read config file");
  }

  IniScan scan;
  try {
    scan = scan_ini(file);
  } catch (const IniSyntaxError& error) {
    throw ConfigError(path + ":" + std::to_string(error.line()) + ": " + error.what());
  }
  const auto location = [&path](int line) { return path + ":" + std::to_string(line); };

  const std::vector<std::string> known_sections = section_names(keys);
  Settings settings;
  for (const IniSectionHeader& header : scan.sections) {
    if (std::find(known_sections.begin(), known_sections.end(), header.name) != known_sections.end()) continue;
    if (is_lane_section(header.name)) {
      if (!valid_lane_name(std::string_view(header.name).substr(kLaneSectionPrefix.size())))
        throw ConfigError(location(header.line) + ": [" + printable(header.name) +
                          "]: a lane name is letters, digits, '_' and '-', e.g. [lane.pagerank]");
      settings.emplace(header.name, Setting{"", location(header.line), false});  // first header wins
      continue;
    }
    std::string message = location(header.line) + ": unknown section [" + printable(header.name) + "]";
    if (const auto suggestion = closest(header.name, known_sections)) message += " (did you mean [" + *suggestion + "]?)";
    throw ConfigError(message);
  }

  std::map<std::string, int> line_of_key;
  for (const IniEntry& entry : scan.entries) {
    if (is_lane_section(entry.section)) {  // any key: the lane validates its own
      const std::string full_name = entry.section + "." + entry.key;
      if (const auto previous = line_of_key.find(full_name); previous != line_of_key.end())
        throw ConfigError(location(entry.line) + ": [" + entry.section + "] " + printable(entry.key) +
                          " given twice (first at line " + std::to_string(previous->second) + ")");
      line_of_key[full_name] = entry.line;
      settings[full_name] = {entry.value, location(entry.line), false};
      continue;
    }
    std::vector<std::string> section_keys;
    for (const OptionKey& key : keys) {
      if (key.section == entry.section) section_keys.push_back(key.name);
    }
    if (std::find(section_keys.begin(), section_keys.end(), entry.key) == section_keys.end()) {
      std::string message =
          location(entry.line) + ": unknown key '" + printable(entry.key) + "' in [" + entry.section + "]";
      if (const auto suggestion = closest(entry.key, section_keys)) message += " (did you mean '" + *suggestion + "'?)";
      throw ConfigError(message);
    }
    const std::string full_name = entry.section + "." + entry.key;
    if (const auto previous = line_of_key.find(full_name); previous != line_of_key.end()) {
      throw ConfigError(location(entry.line) + ": [" + entry.section + "] " + entry.key +
                        " given twice (first at line " + std::to_string(previous->second) + ")");
    }
    line_of_key[full_name] = entry.line;
    settings[full_name] = {entry.value, location(entry.line), false};
  }
  return settings;
}

// ---------------------------------------------------------------------------------------
// Command line, through Boost.Program_options: it handles --key=value and --key value.

constexpr unsigned kHelpLineLength = 120;

po::options_description command_line_description(const std::vector<OptionKey>& keys) {
  const TrainOptions defaults;
  po::options_description all(kHelpLineLength);
  po::options_description general("general", kHelpLineLength);
  general.add_options()
      ("config", po::value<std::string>()->value_name("FILE"), "INI config file with the sections below")
      ("help", "print this help and exit");
  all.add(general);
  // One options_description per section so --help groups the keys.
  for (const std::string& section : section_names(keys)) {
    po::options_description group("[" + section + "]", kHelpLineLength);
    for (const OptionKey& key : keys) {
      if (key.section != section) continue;
      const std::string default_text = key.format(defaults);
      group.add_options()(
          key.full_name().c_str(),
          po::value<std::string>()->value_name(key.value_name)->default_value(default_text, default_text.empty() ? "\"\"" : default_text),
          key.description.c_str());
    }
    all.add(group);
  }
  return all;
}

struct CommandLine {
  Settings settings;
  std::optional<std::string> config_path;
  bool help = false;
};

CommandLine read_command_line(int argc, const char* const* argv, const std::vector<OptionKey>& keys) {
  Settings lane_settings;
  std::vector<const char*> rest(argv, argv + std::min(argc, 1));
  // Boost refuses "--key=" (an empty value after '='), which is how a user clears a key such as
  // --lanes.enabled=; the same value as a separate empty token is accepted.
  std::vector<std::string> cleared;
  cleared.reserve(static_cast<std::size_t>(argc));
  static const char kEmpty[] = "";
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument.substr(0, 2 + kLaneSectionPrefix.size()) != "--lane.") {
      if (argument.size() > 3 && argument.substr(0, 2) == "--" && argument.back() == '=' &&
          argument.find('=') == argument.size() - 1) {
        rest.push_back(cleared.emplace_back(argument.substr(0, argument.size() - 1)).c_str());
        rest.push_back(kEmpty);
      } else {
        rest.push_back(argv[i]);
      }
      continue;
    }
    const std::size_t equals = argument.find('=');
    const std::string name(argument.substr(2, equals == std::string_view::npos ? std::string_view::npos : equals - 2));
    const std::size_t dot = name.find('.', kLaneSectionPrefix.size());
    if (dot == std::string::npos || dot + 1 == name.size() ||
        !valid_lane_name(std::string_view(name).substr(kLaneSectionPrefix.size(), dot - kLaneSectionPrefix.size())))
      throw ConfigError("command line: --" + printable(name) + ": expected --lane.NAME.key=value");
    std::string value;
    if (equals != std::string_view::npos) {
      value = std::string(argument.substr(equals + 1));
    } else if (i + 1 < argc && std::string_view(argv[i + 1]).substr(0, 2) != "--") {
      value = argv[++i];
    } else {
      throw ConfigError("command line: --" + printable(name) + ": missing value");
    }
    if (lane_settings.count(name)) throw ConfigError("command line: --" + printable(name) + " given twice");
    lane_settings[name] = {value, "command line", true};
    lane_settings.emplace(name.substr(0, dot), Setting{"", "command line", true});  // the section marker
  }
  argc = static_cast<int>(rest.size());
  argv = rest.data();

  po::parsed_options parsed(nullptr);
  try {
    // Without guessing, --train.l is an error instead of silently meaning --train.lr.
    const int style = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;
    parsed = po::command_line_parser(argc, argv).options(command_line_description(keys)).style(style).run();
  } catch (const po::unknown_option& error) {
    std::vector<std::string> full_names;
    for (const OptionKey& key : keys) full_names.push_back(key.full_name());
    // Boost reports the whole token ("--train.lrr=3"); the key alone reads better.
    const std::string token = error.get_option_name();
    const std::string option = token.substr(0, token.find('='));
    std::string message = "command line: " + printable(option) + ": unknown key";
    const std::string_view bare_name = std::string_view(option).substr(option.find_first_not_of('-'));
    if (const auto suggestion = closest(bare_name, full_names)) message += " (did you mean --" + *suggestion + "?)";
    throw ConfigError(message);
  } catch (const po::error& error) {
    throw ConfigError("command line: " + printable(error.what()));
  }

  CommandLine command_line;
  for (const po::option& option : parsed.options) {
    if (option.string_key.empty() || option.position_key >= 0) {
      std::string argument;
      for (const std::string& token : option.original_tokens) argument += token;
      throw ConfigError("command line: unexpected argument '" + printable(argument) + "'");
    }
    if (option.string_key == "help") {
      command_line.help = true;
      continue;
    }
    if (option.string_key == "config") {
      if (command_line.config_path) throw ConfigError("command line: --config given twice");
      command_line.config_path = option.value.at(0);
      continue;
    }
    if (command_line.settings.count(option.string_key)) {
      throw ConfigError("command line: --" + option.string_key + " given twice");
    }
    command_line.settings[option.string_key] = {option.value.at(0), "command line", true};
  }
  command_line.settings.merge(lane_settings);
  return command_line;
}

// ---------------------------------------------------------------------------------------
// Checks that involve more than one key. The error points at the first of the keys that
// was set explicitly, since a default cannot be the user's mistake.

std::string location_of(const Settings& settings, const std::string& first_key, const std::string& second_key) {
  for (const std::string& key : {first_key, second_key}) {
    if (const auto found = settings.find(key); found != settings.end()) return found->second.location;
  }
  return "defaults";
}

void check_combinations(const TrainOptions& options, const Settings& settings) {
  const ModelOptions& model = options.model;
  if (model.d_model % model.heads != 0) {
    throw ConfigError(location_of(settings, "model.heads", "model.d_model") + ": [model] heads = " +
                      std::to_string(model.heads) + " does not divide d_model = " + std::to_string(model.d_model));
  }
  const TrainLoopOptions& train = options.train;
  if (train.global_batch % train.micro_batch != 0) {
    throw ConfigError(location_of(settings, "train.global_batch", "train.micro_batch") +
                      ": [train] global_batch = " + std::to_string(train.global_batch) +
                      " is not a multiple of micro_batch = " + std::to_string(train.micro_batch));
  }
  if (train.min_lr > train.lr) {
    throw ConfigError(location_of(settings, "train.min_lr", "train.lr") + ": [train] min_lr = " +
                      format_number(train.min_lr) + " is greater than lr = " + format_number(train.lr));
  }
  if (model.attention == "cudnn" && options.runtime.backend.rfind("cuda", 0) != 0)
    throw ConfigError(location_of(settings, "model.attention", "runtime.backend") +
                      ": [model] attention = cudnn runs cuDNN's fused attention on a GPU: it needs [runtime] "
                      "backend = cuda (backend is " + options.runtime.backend + ")");
  if (options.lanes.sm_partition > 0 && options.runtime.backend.rfind("cuda", 0) != 0)
    throw ConfigError(location_of(settings, "lanes.sm_partition", "runtime.backend") + ": [lanes] sm_partition = " +
                      std::to_string(options.lanes.sm_partition) + " partitions a GPU's SMs: it needs [runtime] "
                      "backend = cuda (backend is " + options.runtime.backend + ")");
  const ParallelOptions& par = options.parallel;
  if (model.heads % par.tp != 0) {
    throw ConfigError(location_of(settings, "parallel.tp", "model.heads") + ": [parallel] tp = " +
                      std::to_string(par.tp) + " does not divide [model] heads = " + std::to_string(model.heads));
  }
  if ((par.schedule == "interleaved") != (par.virtual_stages > 1)) {
    throw ConfigError(location_of(settings, "parallel.virtual_stages", "parallel.schedule") +
                      ": [parallel] virtual_stages = " + std::to_string(par.virtual_stages) +
                      " needs schedule = interleaved (and interleaved needs virtual_stages >= 2)");
  }
  if (par.layers_per_stage.empty() && model.layers % (par.pp * par.virtual_stages) != 0) {
    throw ConfigError(location_of(settings, "parallel.pp", "model.layers") + ": [model] layers = " +
                      std::to_string(model.layers) + " cannot be split evenly over pp * virtual_stages = " +
                      std::to_string(par.pp * par.virtual_stages) + " (set [parallel] layers_per_stage)");
  }
  if (train.warmup_steps > train.steps) {
    throw ConfigError(location_of(settings, "train.warmup_steps", "train.steps") + ": [train] warmup_steps = " +
                      std::to_string(train.warmup_steps) + " is greater than steps = " + std::to_string(train.steps));
  }
  if (!options.run.trace_steps.empty()) {
    try {
      options.run.traced_steps();
    } catch (const ConfigError& e) {
      const auto found = settings.find("run.trace_steps");
      throw ConfigError((found == settings.end() ? std::string("defaults") : found->second.location) +
                        ": [run] trace_steps = '" + options.run.trace_steps + "': " + e.what());
    }
  }
  if (!options.data.blend.empty()) {
    try {
      parse_blend(options.data.blend);
    } catch (const DataError& e) {
      const auto found = settings.find("data.blend");
      throw ConfigError((found == settings.end() ? std::string("defaults") : found->second.location) +
                        ": [data] blend: " + printable(e.what()));
    }
  }
}

// Sizes that would otherwise overflow or fail at allocation, and thread counts that stall the
// host: checked in 64-bit, overflow-checked arithmetic before anything is allocated.
void check_resources(const TrainOptions& options, const Settings& settings) {
  const ModelOptions& model = options.model;
  const GptConfig config{model.layers, model.d_model, model.heads, model.seq_len, model.vocab_size};
  const auto key_of = [](const std::string& word) { return "model." + word; };
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_bytes > 0) {
    const std::int64_t ranks = std::int64_t{options.parallel.tp} * options.parallel.pp;
    const int ranks_splitting_model = static_cast<int>(std::min<std::int64_t>(ranks, std::numeric_limits<int>::max()));
    const std::uint64_t memory = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_bytes);
    if (const auto problem = config.memory_problem(memory, ranks_splitting_model))
      throw ConfigError(location_of(settings, key_of(problem->key), "model.d_model") + ": [model] " +
                        problem->message + " (the memory of this host)");
  }
  if (const std::string problem = config.problem(); !problem.empty()) {
    const std::string word = problem.substr(0, problem.find(' '));  // "vocab_size (N) must be ..."
    throw ConfigError(location_of(settings, key_of(word), "model.d_model") + ": [model] " + problem);
  }
  const TrainLoopOptions& train = options.train;
  // Rows of one forward pass (micro_batch x seq_len) are an int in the model code.
  if (std::int64_t{train.micro_batch} * model.seq_len > std::numeric_limits<int>::max())
    throw ConfigError(location_of(settings, "train.micro_batch", "model.seq_len") + ": [train] micro_batch = " +
                      std::to_string(train.micro_batch) + " x [model] seq_len = " + std::to_string(model.seq_len) +
                      " tokens per forward pass is more than " + std::to_string(std::numeric_limits<int>::max()));
  // More OpenMP threads than cores only spin against each other (threads = 2000 on 2 cores never
  // got through start-up); twice the cores still lets a config written for 2 run on 1.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (train.threads > 2 * cores)
    throw ConfigError(location_of(settings, "train.threads", "train.threads") + ": [train] threads = " +
                      std::to_string(train.threads) + " is more than twice the " + std::to_string(cores) +
                      " cores of this host (0 uses every core)");
}

// [lanes] and [lane.NAME]: values the key table cannot check on their own.
void check_lanes(const TrainOptions& options, const Settings& settings) {
  const LanesOptions& lanes = options.lanes;
  const auto where = [&settings](const std::string& key) {
    const auto found = settings.find(key);
    return found == settings.end() ? std::string("defaults") : found->second.location;
  };
  const std::vector<std::string> enabled = lanes.enabled_lanes();
  for (std::size_t i = 0; i < enabled.size(); ++i) {
    if (!valid_lane_name(enabled[i]))
      throw ConfigError(where("lanes.enabled") + ": [lanes] enabled = '" + printable(lanes.enabled) +
                        "': lane names are letters, digits, '_' and '-', separated by commas");
    if (std::find(enabled.begin(), enabled.begin() + static_cast<std::ptrdiff_t>(i), enabled[i]) !=
        enabled.begin() + static_cast<std::ptrdiff_t>(i))
      throw ConfigError(where("lanes.enabled") + ": [lanes] enabled = '" + lanes.enabled + "': '" + enabled[i] +
                        "' given twice");
  }
  // Lanes turned off explicitly (`enabled =`, e.g. --lanes.enabled= for the lanes-off baseline of a
  // lanes config) keep their [lane.NAME] sections unused; otherwise a section of a lane that is not
  // enabled is most likely a typo or a forgotten `enabled`.
  const bool switched_off = enabled.empty() && settings.count("lanes.enabled");
  for (const auto& [name, values] : lanes.lane_sections) {
    if (!switched_off && std::find(enabled.begin(), enabled.end(), name) == enabled.end())
      throw ConfigError(where("lane." + name) + ": [lane." + name + "] given but '" + name +
                        "' is not in [lanes] enabled");
  }
  if (static_cast<long long>(enabled.size()) * lanes.memory_mb > lanes.stage_memory_mb)
    throw ConfigError((settings.count("lanes.memory_mb") || settings.count("lanes.stage_memory_mb")
                           ? location_of(settings, "lanes.memory_mb", "lanes.stage_memory_mb")
                           : where("lanes.enabled")) +
                      ": [lanes] memory_mb = " +
                      std::to_string(lanes.memory_mb) + " x " + std::to_string(enabled.size()) +
                      " enabled lanes exceeds stage_memory_mb = " + std::to_string(lanes.stage_memory_mb));
  if (lanes.stages != "all") {
    const std::vector<std::string> stages = split_list(lanes.stages);
    std::vector<int> seen;
    for (const std::string& item : stages) {
      const std::optional<int> stage = parse_integer<int>(item);
      if (!stage || *stage < 0 || *stage >= options.parallel.pp || std::count(seen.begin(), seen.end(), *stage))
        throw ConfigError(where("lanes.stages") + ": [lanes] stages = '" + printable(lanes.stages) +
                          "': expected all, or distinct stage numbers in [0, " +
                          std::to_string(options.parallel.pp - 1) + "] separated by commas");
      seen.push_back(*stage);
    }
    if (stages.empty())
      throw ConfigError(where("lanes.stages") + ": [lanes] stages = '': expected all, or stage numbers");
  }
  if (lanes.dedicated_price_per_hour > 0 && !(lanes.train_price_per_hour > 0))
    throw ConfigError(where("lanes.dedicated_price_per_hour") +
                      ": [lanes] dedicated_price_per_hour needs train_price_per_hour too (the saving compares the two)");
  for (const std::string& path : lanes.plugin_paths()) {
    if (path.empty())
      throw ConfigError(where("lanes.plugins") + ": [lanes] plugins = '" + printable(lanes.plugins) +
                        "': an empty path");
  }
}

}  // namespace

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

}  // namespace pipelane
