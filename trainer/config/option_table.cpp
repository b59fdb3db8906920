// The key table: every [section] key of `pipelane train`, its type, range, help and field.
#include "trainer/config/option_machinery.h"

namespace pipelane::train_option_detail {

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

  // A tokenizer name of datasets/tokenizer_registry.h; no file is read here (the run loads it).
  SectionKeys& tokenizer(std::string name, std::string Section::*field, std::string description) {
    const auto member = member_;
    add(std::move(name), "NAME", std::move(description),
        [member, field](const TrainOptions& options) { return options.*member.*field; },
        [member, field](TrainOptions& options, std::string_view text) -> std::optional<std::string> {
          const TokenizerRegistry registry = TokenizerRegistry::standard();
          try {
            registry.check_name(std::string(text));
          } catch (const DataError&) {
            return "expected " + registry.names();
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
            "only the softmax statistics [B,heads,T]; needs backend = cuda)")
      .text("arch", &ModelOptions::arch, {"gpt2", "llama"},
            "model family: its parameter names (Hugging Face's GPT2LMHeadModel or LlamaForCausalLM) and the "
            "defaults of the keys below (gpt2: layernorm, learned, gelu, tied, bias all; llama: rmsnorm, rope "
            "500000, swiglu, untied, bias none)")
      .text("norm", &ModelOptions::norm, {"layernorm", "rmsnorm"}, "normalisation (default: arch's)")
      .number("norm_eps", &ModelOptions::norm_eps, greater_than(0),
              "rmsnorm's epsilon (layernorm's is always 1e-5)")
      .text("position", &ModelOptions::position, {"learned", "rope"},
            "positions: a learned table of seq_len rows, or rotary embeddings on q and k (default: arch's)")
      .number("rope_theta", &ModelOptions::rope_theta, greater_than(0), "RoPE base (default: arch's; llama 500000)")
      .text("rope_scaling", &ModelOptions::rope_scaling, {"none", "llama3"},
            "RoPE frequency scaling: none, or Llama 3.1's (rope_factor, rope_low/high_freq_factor, "
            "rope_original_context)")
      .number("rope_factor", &ModelOptions::rope_factor, at_least(1), "llama3 scaling: long wavelengths divided by this")
      .number("rope_low_freq_factor", &ModelOptions::rope_low_freq_factor, greater_than(0),
              "llama3 scaling: wavelengths above rope_original_context / this are scaled")
      .number("rope_high_freq_factor", &ModelOptions::rope_high_freq_factor, greater_than(0),
              "llama3 scaling: wavelengths below rope_original_context / this are kept")
      .integer("rope_original_context", &ModelOptions::rope_original_context, 1,
               "llama3 scaling: the context the model was pretrained with")
      .text("mlp", &ModelOptions::mlp, {"gelu", "swiglu"},
            "MLP: gelu (c_fc, GeLU, c_proj) or swiglu (down(silu(gate(x)) * up(x))) (default: arch's)")
      .integer("ffn_hidden", &ModelOptions::ffn_hidden, 0,
               "MLP hidden width; 0: 4 x d_model (gelu) or Meta's Llama rule from ffn_multiple_of and "
               "ffn_dim_multiplier (swiglu)")
      .integer("ffn_multiple_of", &ModelOptions::ffn_multiple_of, 1, "Llama rule: the width rounds up to this")
      .number("ffn_dim_multiplier", &ModelOptions::ffn_dim_multiplier, at_least(0),
              "Llama rule: 2/3 x 4 x d_model times this; 0: none")
      .integer("kv_heads", &ModelOptions::kv_heads, 0,
               "key/value heads (grouped-query attention; must divide heads; 1: multi-query); 0: heads")
      .boolean("tie_embeddings", &ModelOptions::tie_embeddings,
               "the LM head is the token embedding (else its own lm_head.weight) (default: arch's)")
      .text("bias", &ModelOptions::bias, {"all", "none", "qkv"},
            "biases of the linear layers: all, none, or q/k/v only (Qwen2) (default: arch's)");
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
            "not halved (cpu: an emulation, the reference for cuda)")
      .text("storage", &TrainLoopOptions::storage, {"fp32", "bf16"},
            "fp32, or bf16 (with precision = bf16, Megatron-LM's --bf16 for activations): every activation a "
            "layer keeps for backward and every stage-to-stage message (activations and their gradients) in "
            "bf16, half the bytes; the norms' statistics, weights (fp32 masters), gradients and AdamW state "
            "stay fp32. Trains within bf16's tolerance of fp32, not bit-identically")
      .text("gemm_weights", &TrainLoopOptions::gemm_weights, {"fp32", "bf16"},
            "what the GEMMs read as weights: fp32, the parameters themselves (under precision = bf16 each GEMM "
            "rounds them to bf16 as it reads them); or bf16 (with precision = bf16), a bf16 copy of the "
            "parameters made once a step, after the optimizer, which every GEMM reads as it is: no rounding "
            "pass per GEMM, 2 more bytes a parameter (the fp32 parameters stay, as the masters; under "
            "distributed_optimizer the masters are sharded over dp too: 2 + 4 + 12/dp bytes a parameter). "
            "The same values, so the same bits as fp32")
      .text("recompute", &TrainLoopOptions::recompute, {"none", "selective", "full"},
            "activation recomputation: none; selective (the attention core's softmax state rebuilt in "
            "backward); full (layers keep only their input and rerun their forward before their backward). "
            "Losses and gradients are bit-identical to none")
      .text("recompute_method", &TrainLoopOptions::recompute_method, {"uniform", "block"},
            "full only: uniform recomputes every layer, in groups of recompute_layers that keep only the "
            "group's input; block recomputes only the first recompute_layers layers of each stage")
      .integer("recompute_layers", &TrainLoopOptions::recompute_layers, 1,
               "full only: layers per group (uniform) or layers recomputed per stage (block)")
      .boolean("distributed_optimizer", &TrainLoopOptions::distributed_optimizer,
               "ZeRO-1: each data-parallel rank keeps AdamW's moments for its 1/dp shard only; gradients "
               "are reduce-scattered and updated parameters all-gathered. Checkpoints keep the replicated "
               "layout (any dp resumes). With dp = 1 it is the replicated optimizer");
  SectionKeys<DataOptions>(keys, "data", &TrainOptions::data)
      .text("path", &DataOptions::path, {}, "training data: HDF5 token store, Megatron X.bin/X.idx or llm.c .bin shard")
      .tokenizer("tokenizer", &DataOptions::tokenizer,
                 "how the data was tokenized, as prepare-data --tokenizer named it: byte, gpt2, cl100k, o200k, "
                 "llama3, hf:PATH/tokenizer.json or spm:PATH.model")
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
            "layers of each virtual stage, comma-separated; empty splits evenly")
      .boolean("sequence_parallel", &ParallelOptions::sequence_parallel,
               "sequence parallelism beside tp (Megatron-LM's): norms, residual adds and the activations "
               "between the tensor-parallel blocks are split by rows over the tp ranks (all-gather before "
               "and reduce-scatter after each block instead of an all-reduce), and so are the stage-to-stage "
               "messages: about 1/tp of those activations. Needs tp > 1 dividing seq_len");
  SectionKeys<RunOptions>(keys, "run", &TrainOptions::run)
      .text("dir", &RunOptions::dir, {}, "directory for logs, checkpoints and the resolved config")
      .integer("log_every", &RunOptions::log_every, 1, "steps between log lines")
      .integer("checkpoint_every", &RunOptions::checkpoint_every, -1,
               "steps between checkpoints in <dir>/checkpoints, and one after the last step; -1: only "
               "after the last step (so generate, eval and export work on any finished run); 0: none")
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
      .integer("control_every", &LanesOptions::control_every, 0,
               "after profiling, about one gap in this many is left empty (a control gap), so that summary.json "
               "can estimate what lanes cost training beyond their overrun; 0: none")
      .text("stages", &LanesOptions::stages, {}, "pipeline stages that run lanes: all, or a list such as 0,2")
      .text("plugins", &LanesOptions::plugins, {}, "lane plugins (.so paths), comma-separated")
      .text("isolation", &LanesOptions::isolation, {"auto", "process", "thread"},
            "where lanes run: process (a worker process per lane: a crash, hang or leak cannot reach "
            "training), thread (in-process, unisolated: trusted code only), or auto (plugins and the "
            "command lane in processes, other built-ins in-process)")
      .integer("output_mb", &LanesOptions::output_mb, 1, "disk quota of each lane's output directory (MiB)")
      .integer("state_mb", &LanesOptions::state_mb, 1,
               "the most a lane's saved state may be (MiB); a lane over it is quarantined and the checkpoint "
               "written without its state")
      .integer("max_processes", &LanesOptions::max_processes, 8,
               "processes and threads each lane worker may have at once (its pids cgroup, the sandbox's two "
               "included); a fork past it fails and quarantines the lane")
      .text("network", &LanesOptions::network, {},
            "lanes (comma-separated) whose worker keeps the host's network; the others get a network "
            "namespace with only loopback")
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


}  // namespace pipelane::train_option_detail
