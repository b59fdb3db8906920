// Checks of the options that involve more than one key, and of the lanes' sections.
#include "trainer/config/option_machinery.h"

namespace pipelane::train_option_detail {

// ---------------------------------------------------------------------------------------
// Checks that involve more than one key. The error points at the first of the keys that
// was set explicitly, since a default cannot be the user's mistake.

std::string location_of(const Settings& settings, const std::string& first_key, const std::string& second_key) {
  for (const std::string& key : {first_key, second_key}) {
    if (const auto found = settings.find(key); found != settings.end()) return found->second.location;
  }
  return "defaults";
}

// [model] keys the config does not set take the defaults of its arch (GptConfig::apply_arch_defaults).
void apply_arch_defaults(ModelOptions& m, const Settings& settings) {
  GptConfig d;
  d.apply_arch_defaults(m.arch == "llama" ? ModelArch::Llama : ModelArch::Gpt2);
  const auto unset = [&settings](const char* key) { return settings.count(std::string("model.") + key) == 0; };
  if (unset("norm")) m.norm = norm_name(d.norm);
  if (unset("position")) m.position = position_name(d.position);
  if (unset("rope_theta")) m.rope_theta = d.rope_theta;
  if (unset("mlp")) m.mlp = mlp_name(d.mlp);
  if (unset("tie_embeddings")) m.tie_embeddings = d.tie_embeddings;
  if (unset("bias")) m.bias = bias_name(d.bias);
}

// The family keys that only mean something together with another: set to anything but their
// default without it, they are refused (at their default they may be written, as to_ini does).
void check_family_keys(const ModelOptions& model, const Settings& settings) {
  const ModelOptions defaults;
  const auto changed = [&](const char* key, bool differs) -> const Setting* {
    const auto found = settings.find(std::string("model.") + key);
    return found != settings.end() && differs ? &found->second : nullptr;
  };
  if (model.rope_scaling == "none") {
    const std::pair<const char*, bool> keys[] = {
        {"rope_factor", model.rope_factor != defaults.rope_factor},
        {"rope_low_freq_factor", model.rope_low_freq_factor != defaults.rope_low_freq_factor},
        {"rope_high_freq_factor", model.rope_high_freq_factor != defaults.rope_high_freq_factor},
        {"rope_original_context", model.rope_original_context != defaults.rope_original_context}};
    for (const auto& [key, differs] : keys)
      if (const Setting* s = changed(key, differs))
        throw ConfigError(s->location + ": [model] " + key + " needs rope_scaling = llama3");
  }
  if (model.mlp != "swiglu" || model.ffn_hidden > 0) {
    const std::pair<const char*, bool> keys[] = {
        {"ffn_multiple_of", model.ffn_multiple_of != defaults.ffn_multiple_of},
        {"ffn_dim_multiplier", model.ffn_dim_multiplier != defaults.ffn_dim_multiplier}};
    for (const auto& [key, differs] : keys)
      if (const Setting* s = changed(key, differs))
        throw ConfigError(s->location + ": [model] " + key +
                          " sets the width of mlp = swiglu when ffn_hidden = 0 (mlp is " + model.mlp +
                          ", ffn_hidden " + std::to_string(model.ffn_hidden) + ")");
  }
}

void check_combinations(const TrainOptions& options, const Settings& settings) {
  const ModelOptions& model = options.model;
  check_family_keys(model, settings);
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
  if (train.storage == "bf16" && train.precision != "bf16") {
    throw ConfigError(location_of(settings, "train.storage", "train.precision") +
                      ": [train] storage = bf16 keeps activations in bf16 for bf16 GEMMs: it needs precision = bf16 "
                      "(precision is " + train.precision + ")");
  }
  if (train.gemm_weights == "bf16" && train.precision != "bf16") {
    throw ConfigError(location_of(settings, "train.gemm_weights", "train.precision") +
                      ": [train] gemm_weights = bf16 is the copy of the weights that bf16 GEMMs read: it needs "
                      "precision = bf16 (precision is " + train.precision + ")");
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
  // Like Megatron-LM (num_query_groups % tensor_model_parallel_size == 0): kv heads are split
  // across the tp ranks, never replicated.
  const GptConfig family = gpt_config_from(model);
  if (model.kv_heads > 0 && model.heads % model.kv_heads == 0 && family.n_kv_heads() % par.tp != 0)
    throw ConfigError(location_of(settings, "parallel.tp", "model.kv_heads") + ": [parallel] tp = " +
                      std::to_string(par.tp) + " does not divide [model] kv_heads = " + std::to_string(model.kv_heads) +
                      " (key/value heads are split across tensor-parallel ranks, not replicated, as in Megatron-LM)");
  if (family.mlp_hidden() % par.tp != 0)
    throw ConfigError(location_of(settings, "parallel.tp", "model.ffn_hidden") + ": [parallel] tp = " +
                      std::to_string(par.tp) + " does not divide the MLP width " + std::to_string(family.mlp_hidden()) +
                      " ([model] ffn_hidden)");
  if (par.sequence_parallel && par.tp < 2)
    throw ConfigError(location_of(settings, "parallel.sequence_parallel", "parallel.tp") +
                      ": [parallel] sequence_parallel splits the sequence over the tensor-parallel ranks: it needs "
                      "tp > 1 (tp is " + std::to_string(par.tp) + ")");
  if (par.sequence_parallel && model.seq_len % par.tp != 0)
    throw ConfigError(location_of(settings, "parallel.sequence_parallel", "model.seq_len") +
                      ": [parallel] sequence_parallel needs tp = " + std::to_string(par.tp) +
                      " to divide [model] seq_len = " + std::to_string(model.seq_len));
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
                        ": [run] trace_steps = '" + printable_excerpt(options.run.trace_steps) + "': " + e.what());
    }
  }
  if (!options.data.blend.empty()) {
    try {
      parse_blend(options.data.blend);
    } catch (const DataError& e) {
      const auto found = settings.find("data.blend");
      throw ConfigError((found == settings.end() ? std::string("defaults") : found->second.location) +
                        ": [data] blend: " + printable_excerpt(e.what()));
    }
  }
}

// Sizes that would otherwise overflow or fail at allocation, and thread counts that stall the
// host: checked in 64-bit, overflow-checked arithmetic before anything is allocated.
void check_resources(const TrainOptions& options, const Settings& settings) {
  const ModelOptions& model = options.model;
  const GptConfig config = gpt_config_from(model);
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

// [lanes] enabled: lane names, each once.
void check_lanes(const TrainOptions& options, const Settings& settings) {
  const LanesOptions& lanes = options.lanes;
  const auto where = [&settings](const std::string& key) {
    const auto found = settings.find(key);
    return found == settings.end() ? std::string("defaults") : found->second.location;
  };
  const std::vector<std::string> enabled = lanes.enabled_lanes();
  for (std::size_t i = 0; i < enabled.size(); ++i) {
    if (!valid_lane_name(enabled[i]))
      throw ConfigError(where("lanes.enabled") + ": [lanes] enabled = '" + printable_excerpt(lanes.enabled) +
                        "': lane names are letters, digits, '_' and '-', separated by commas");
    if (std::find(enabled.begin(), enabled.begin() + static_cast<std::ptrdiff_t>(i), enabled[i]) !=
        enabled.begin() + static_cast<std::ptrdiff_t>(i))
      throw ConfigError(where("lanes.enabled") + ": [lanes] enabled = '" + printable_excerpt(lanes.enabled) +
                        "': '" + printable_excerpt(enabled[i]) + "' given twice");
  }
}

// A [lane.NAME] section of a lane that is not enabled is ignored with a note: a config keeps the
// sections of all its lanes while --lanes.enabled= (or a shorter list) picks some of them, e.g. for
// the lanes-off baseline of a lanes config. The note still shows a misspelt lane name.
std::vector<std::string> lane_section_notes(const LanesOptions& lanes, const Settings& settings) {
  const std::vector<std::string> enabled = lanes.enabled_lanes();
  std::vector<std::string> notes;
  for (const auto& [name, values] : lanes.lane_sections) {
    if (std::find(enabled.begin(), enabled.end(), name) != enabled.end()) continue;
    const auto found = settings.find("lane." + name);
    notes.push_back((found == settings.end() ? std::string("command line") : found->second.location) + ": [lane." +
                    printable_excerpt(name) + "] ignored: '" + printable_excerpt(name) + "' is not in [lanes] enabled (" +
                    (enabled.empty() ? std::string("lanes are off") : "enabled = " + printable_excerpt(lanes.enabled)) +
                    ")");
  }
  return notes;
}

// [lanes] values the key table cannot check on their own: quotas, stages, prices, plugin paths.
void check_lanes_values(const TrainOptions& options, const Settings& settings) {
  const LanesOptions& lanes = options.lanes;
  const auto where = [&settings](const std::string& key) {
    const auto found = settings.find(key);
    return found == settings.end() ? std::string("defaults") : found->second.location;
  };
  const std::vector<std::string> enabled = lanes.enabled_lanes();
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
        throw ConfigError(where("lanes.stages") + ": [lanes] stages = '" + printable_excerpt(lanes.stages) +
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
      throw ConfigError(where("lanes.plugins") + ": [lanes] plugins = '" + printable_excerpt(lanes.plugins) +
                        "': an empty path");
  }
}


}  // namespace pipelane::train_option_detail
