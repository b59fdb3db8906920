#pragma once
#include "trainer/config/layer.h"  // trainer/README.md: the layers
// Configuration of `pipelane train --config FILE [--section.key=value ...]`.
//
// The config file is INI with one section per struct below; every key can also be given
// on the command line as --section.key=value or --section.key value, which overrides the
// file. The list of keys, their descriptions and their valid ranges live in one table in
// train_options.cpp, so adding a key is one line there plus the field here.

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/recompute.h"

namespace pipelane {

struct ModelOptions {
  int layers = 4;
  int d_model = 128;
  int heads = 4;
  int seq_len = 128;
  int vocab_size = 256;
  std::string attention = "cublas";  // CUDA: cublas (batched GEMMs + own softmax) | cudnn (refused for now)
  // The family and its orthogonal keys. A key the config does not set takes arch's default
  // (GptConfig::apply_arch_defaults), so these defaults are GPT-2's.
  std::string arch = "gpt2";        // gpt2 | llama
  std::string norm = "layernorm";   // layernorm | rmsnorm
  double norm_eps = 1e-5;
  std::string position = "learned";  // learned | rope
  double rope_theta = 10000;
  std::string rope_scaling = "none";  // none | llama3
  double rope_factor = 8;
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int rope_original_context = 8192;
  std::string mlp = "gelu";  // gelu | swiglu
  int ffn_hidden = 0;        // 0: 4 * d_model (gelu) or Meta's rule (swiglu)
  int ffn_multiple_of = 256;
  double ffn_dim_multiplier = 0;  // 0: none
  int kv_heads = 0;               // 0: heads
  bool tie_embeddings = true;
  std::string bias = "all";  // all | none | qkv
  friend bool operator==(const ModelOptions&, const ModelOptions&) = default;
};

struct TrainLoopOptions {
  int micro_batch = 8;
  int global_batch = 8;
  int steps = 200;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 20;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: no clipping
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  std::uint64_t seed = 1337;
  int eval_every = 50;  // 0: no evaluation
  int eval_batches = 8;
  int threads = 0;         // 0: all cores
  double peak_gflops = 0;  // 0: the hardware's peak (trainer/run/machine_peak.h)
  int max_bad_steps = 5;          // consecutive NaN/Inf (or spike) steps skipped before stopping
  double loss_spike_zscore = 0;   // skip a step whose loss z-score exceeds this; 0: off
  int sample_every = 0;           // steps between text samples (samples.jsonl); 0: off
  int sample_tokens = 64;         // tokens per sample
  std::string sample_prompt;      // "" starts from <|endoftext|> (gpt2) or a newline (bytes)
  std::string precision = "fp32";  // fp32 | bf16 (the backend's compute precision: bf16 GEMM operands)
  std::string storage = "fp32";    // fp32 | bf16 (activations kept and sent in bf16; needs precision = bf16)
  std::string gemm_weights = "fp32";  // fp32 | bf16 (a bf16 copy of the weights the GEMMs read; needs precision = bf16)
  std::string recompute = "none";           // none | selective | full (model/recompute.h)
  std::string recompute_method = "uniform";  // uniform | block (full only)
  int recompute_layers = 1;                  // full: group size (uniform) or layers per stage (block)
  bool distributed_optimizer = false;        // ZeRO-1 over dp (parallel/sharded_adamw.h)
  friend bool operator==(const TrainLoopOptions&, const TrainLoopOptions&) = default;
};

struct DataOptions {
  std::string path = "data/jargon.h5";
  std::string tokenizer = "byte";  // a name of datasets/tokenizer_registry.h ("byte", "gpt2", "llama3", "hf:PATH", ...)
  std::string sample_mode = "cross-documents";  // or "within-documents" (datasets/sharded_sampler.h)
  std::string blend;  // "PATH:WEIGHT,..." trains on these files by weight; "" trains on `path`
  friend bool operator==(const DataOptions&, const DataOptions&) = default;
};

struct ParallelOptions {
  int tp = 1;
  int pp = 1;
  int dp = 0;  // 0: world size / (tp * pp)
  std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved, zb-h1
  int virtual_stages = 1;         // model chunks per pipeline stage (interleaved only)
  std::string layers_per_stage;   // "" splits evenly; else one count per virtual stage, e.g. "3,1"
  bool sequence_parallel = false;  // residual stream and norms split by rows over tp (needs tp > 1)
  friend bool operator==(const ParallelOptions&, const ParallelOptions&) = default;
};

struct RunOptions {
  std::string dir = "runs/latest";
  int log_every = 10;
  int checkpoint_every = -1;    // steps between checkpoints (and after the last); -1: after the last only; 0: off
  int keep_last = 3;            // complete checkpoints kept
  std::string resume = "auto";  // auto | auto-skip-damaged | none | PATH (trainer/checkpoint/resume.h)
  std::string overwrite = "refuse";  // refuse | archive: checkpoints in the way of a fresh start
  double timeout_s = 600;       // no progress for this long ends the job, naming the wait
  std::string init_from;        // checkpoint or Hugging Face directory whose weights a fresh run starts from
  std::string trace_steps;      // "A-B" (1-based, inclusive) or "none"; "": the first 20 steps the run executes
  // trace_steps as a range: {0, 0} for "none"; {0, 20} for "" (the first 20 executed, wherever they start).
  struct StepRange {
    int first = 0, last = 0;  // 1-based inclusive; first == 0: relative to the run's first step
    int count = 0;            // for the relative form
  };
  StepRange traced_steps() const;
  friend bool operator==(const RunOptions&, const RunOptions&) = default;
};

// [lanes]: side-task lanes run in pipeline bubbles (lanes/README.md). Each [lane.NAME] section (or
// --lane.NAME.key=value) holds keys handed unparsed to lane NAME, which validates them itself.
struct LanesOptions {
  std::string enabled;         // comma-separated lane names; "" turns lanes off
  int memory_mb = 256;         // arena quota of each lane
  int stage_memory_mb = 1024;  // cap on all lanes of one pipeline stage
  double margin = 0.9;         // share of a predicted gap lane steps may fill
  bool deterministic = false;  // freeze the lane steps of each gap after profiling
  int profile_iterations = 2;  // iterations that only measure gaps
  int control_every = 32;      // after profiling, about one gap in N left empty to measure lanes' cost; 0: none
  std::string stages = "all";  // pipeline stages that run lanes: "all" or a list such as "0,2"
  std::string plugins;         // comma-separated paths of lane plugins (.so)
  // auto: plugins and the command lane in a worker process each, other built-ins in-process;
  // process: every lane in a worker; thread: every lane in-process (unisolated: trusted code)
  std::string isolation = "auto";
  int output_mb = 1024;        // disk quota of each lane's output directory
  int state_mb = 64;           // the most a lane's save() may return (checkpointed with training's)
  int max_processes = 256;     // tasks (processes and threads) of each lane worker: its pids cgroup
  std::string network;         // comma-separated lanes whose worker keeps the host's network
  std::string baseline;   // summary.json of a lanes-off run: the overhead in summary.json
  std::string dedicated;  // JSON lines of `pipelane lane-bench NAME --json`: the cost saving
  std::string plan;       // summary.json of a deterministic run: replay its lane plan exactly
  int sm_partition = 0;   // CUDA: SMs of a green context for lane streams; 0 = none
  // Prices per hour (any currency) of one training device and of the dedicated device lane work
  // is valued on; 0: not given, lane work is priced like the training device.
  double train_price_per_hour = 0;
  double dedicated_price_per_hour = 0;
  std::map<std::string, std::map<std::string, std::string>> lane_sections;  // NAME -> key -> value
  std::string lane_sections_source;  // the config file (or "command line"), for the lanes' messages

  std::vector<std::string> enabled_lanes() const;  // `enabled` split and trimmed
  std::vector<std::string> plugin_paths() const;   // `plugins` split and trimmed
  std::vector<std::string> network_lanes() const;  // `network` split and trimmed
  bool runs_on_stage(int stage) const;             // per `stages`
  // Everything but lane_sections_source (where the keys came from is not what they are).
  friend bool operator==(const LanesOptions& a, const LanesOptions& b) {
    return a.enabled == b.enabled && a.memory_mb == b.memory_mb && a.stage_memory_mb == b.stage_memory_mb &&
           a.margin == b.margin && a.deterministic == b.deterministic &&
           a.profile_iterations == b.profile_iterations && a.control_every == b.control_every &&
           a.stages == b.stages && a.plugins == b.plugins &&
           a.baseline == b.baseline && a.dedicated == b.dedicated && a.plan == b.plan &&
           a.sm_partition == b.sm_partition &&
           a.train_price_per_hour == b.train_price_per_hour &&
           a.dedicated_price_per_hour == b.dedicated_price_per_hour && a.isolation == b.isolation &&
           a.output_mb == b.output_mb && a.state_mb == b.state_mb && a.max_processes == b.max_processes &&
           a.network == b.network &&
           a.lane_sections == b.lane_sections;
  }
};

// [runtime]: where training computes.
struct RuntimeOptions {
  std::string backend = "cpu";  // cpu | cuda | cuda:N (runtime/backend_registry.h)
  friend bool operator==(const RuntimeOptions&, const RuntimeOptions&) = default;
};

// [wan]: training across sites (data centres) joined by a WAN (parallel/wan_schedule.h).
struct WanOptions {
  std::string cluster;              // cluster file naming the sites and their links; "": one site
  std::string sharing = "off";      // off | concurrent | temporal
  int connections = 0;              // per cross-site transfer; 0: the inter-site link's `connections`
  std::string placement = "stages";  // stages (across sites) | replicas (across sites: simulated only)
  bool force = false;               // run a tensor-parallel group across sites (else refused)
  friend bool operator==(const WanOptions&, const WanOptions&) = default;
};

struct TrainOptions {
  RuntimeOptions runtime;
  ModelOptions model;
  TrainLoopOptions train;
  DataOptions data;
  ParallelOptions parallel;
  RunOptions run;
  LanesOptions lanes;
  WanOptions wan;
  std::string config_path;      // "" when none given
  bool help_requested = false;  // --help was given; train_options_help() has the text
  // What was given but is not used, one line each ("FILE:LINE: [lane.x] ignored: ..."): `train`
  // prints them before it starts.
  std::vector<std::string> notes;
  // The resolved configuration as an INI file (all keys, all sections); parsing it
  // again gives the same values, so a run directory can record exactly what ran.
  std::string to_ini() const;
};

// what() is a single line starting with where the problem is: "FILE:LINE: ...",
// "FILE: ..." or "command line: ...".
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// argv[0] is the program or subcommand name and is skipped. Reads the --config file if
// given, applies command-line overrides and validates the result. With --help it returns
// at once with help_requested set and default values otherwise. Throws ConfigError.
TrainOptions parse_train_options(int argc, const char* const* argv);

// Usage line plus every key, grouped by section, with its default and a description.
std::string train_options_help();

// The model [model] describes.
GptConfig gpt_config_from(const ModelOptions& m);
// The [model] keys of a model (its sizes and family keys; attention stays the default):
// gpt_config_from(model_options_from(c)) describes c.
ModelOptions model_options_from(const GptConfig& c);
// What [train] recompute, recompute_method and recompute_layers ask for (values already checked).
RecomputeOptions recompute_options_from(const TrainLoopOptions& t);
// Microbatches a step per data-parallel replica: global_batch / (micro_batch x dp). ConfigError
// when micro_batch x dp does not divide global_batch.
int microbatches_per_replica(const TrainLoopOptions& t, int dp);

}  // namespace pipelane
