#include "trainer/cli/memory_command.h"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/memory_model.h"
#include "trainer/cli/command_options.h"
#include "runtime/backend_registry.h"

namespace pipelane {

namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

MemorySpec memory_spec_from(const TrainOptions& o, int element_bytes) {
  const int dp = std::max(1, o.parallel.dp);  // 0 (the world decides): one replica, the others are copies
  MemorySpec m;
  m.model = gpt_config_from(o.model);
  m.schedule = {parse_schedule_kind(o.parallel.schedule), o.parallel.pp, o.parallel.virtual_stages,
                microbatches_per_replica(o.train, dp)};
  m.tp = o.parallel.tp;
  m.micro_batch = o.train.micro_batch;
  m.seq_len = o.model.seq_len;
  m.layers_per_stage = o.parallel.layers_per_stage;
  m.recompute = recompute_options_from(o.train);
  m.sequence_parallel = o.parallel.sequence_parallel;
  m.storage = o.train.storage == "bf16" && element_bytes == 4 ? DType::BF16 : DType::F32;
  m.gemm_weights = o.train.gemm_weights == "bf16" && element_bytes == 4 ? DType::BF16 : DType::F32;
  m.element_bytes = element_bytes;
  m.optimizer_shards = o.train.distributed_optimizer ? dp : 1;
  return m;
}

void print_memory_prediction(const TrainOptions& o, int element_bytes, double device_memory_bytes, std::FILE* out) {
  const MemorySpec spec = memory_spec_from(o, element_bytes);
  // Sizes only: the CPU backend's rules (its attention keeps the probabilities [B, heads, T, T]).
  const std::unique_ptr<Backend> sizing = make_sizing_backend(spec);
  const std::vector<RankMemory> ranks = predict_memory(spec, *sizing);
  const GptConfig& c = spec.model;
  std::fprintf(out, "pipelane memory: %s, %d layers, d_model %d, %d heads, seq_len %d, micro_batch %d: %.3fB parameters\n",
               arch_name(c.arch), c.layers, c.d_model, c.heads, spec.seq_len, spec.micro_batch,
               static_cast<double>(c.total_params().value_or(0)) / 1e9);
  std::fprintf(out, "  grid: tp %d%s x pp %d (data-parallel replicas hold the same), schedule %s, %d microbatches; "
               "recompute %s; storage %s\n",
               spec.tp, spec.sequence_parallel ? " (sequence parallel)" : "", spec.schedule.pp,
               o.parallel.schedule.c_str(), spec.schedule.microbatches,
               describe(spec.recompute).c_str(),
               element_bytes != 4 ? "16-bit (pipelane's layout at 2 bytes an element; predicted only: weights and "
                                    "gradients are not stored so yet)"
               : spec.storage == DType::BF16 ? "bf16 activations and messages, fp32 weights (the masters) and "
                                               "gradients (storage = bf16: what it allocates)"
                                             : "fp32 (pipelane's layout, what it allocates)");
  const bool sharded_masters = masters_sharded(spec);
  if (spec.gemm_weights == DType::BF16)
    std::fprintf(out, "  gemm_weights bf16: a bf16 copy of the weights for the GEMMs (2 bytes a parameter), %s\n",
                 sharded_masters ? "the norms, biases and embedding lookup in fp32 beside it (weights)"
                                 : "the fp32 parameters its masters");
  if (o.train.distributed_optimizer)
    std::fprintf(out, "  distributed optimizer: AdamW state of a %s%s\n",
                 o.parallel.dp > 1 ? ("1/" + std::to_string(o.parallel.dp) + " shard (dp " + std::to_string(o.parallel.dp) +
                                      ") per rank").c_str()
                                   : "whole stage per rank (dp 1; give --parallel.dp=N for the shards of N replicas)",
                 element_bytes != 4 || sharded_masters ? ", fp32 master weights too"
                                                       : "; the fp32 parameters stay whole on every rank");
  if (o.runtime.backend != "cpu")
    std::fprintf(out, "  sizes: the cpu backend's rules (the attention keeps [B, heads, T, T]); %s may keep less\n",
                 o.runtime.backend.c_str());
  std::fprintf(out, "  GiB per rank (every tensor-parallel rank of a stage holds the same):\n");
  std::fprintf(out, "  %5s %8s %9s %8s %8s %9s %9s %11s %8s %8s %8s\n", "stage", "layers", "in flight", "weights",
               "master", "gradients", "optimizer", "activations", "messages", "scratch", "total");
  double largest = 0;
  for (const RankMemory& r : ranks) {
    std::string layers, flight;
    for (const ChunkMemory& ch : r.chunks) {
      layers += (layers.empty() ? "" : ",") + std::to_string(ch.range.first_layer) + "-" +
                std::to_string(ch.range.last_layer - 1);
      flight += (flight.empty() ? "" : ",") + std::to_string(ch.in_flight);
    }
    std::fprintf(out, "  %5d %8s %9s %8s %8s %9s %9s %11s %8s %8s %8s\n", r.stage, layers.c_str(), flight.c_str(),
                 gib(r.weights).c_str(), gib(r.master_weights).c_str(), gib(r.gradients).c_str(),
                 gib(r.optimizer).c_str(), gib(r.activations).c_str(), gib(r.messages).c_str(),
                 gib(r.scratch).c_str(), gib(r.total()).c_str());
    largest = std::max(largest, r.total());
  }
  std::fprintf(out, "  largest rank: %s GiB", gib(largest).c_str());
  if (device_memory_bytes > 0)
    std::fprintf(out, " of %s GiB: %s", gib(device_memory_bytes).c_str(),
                 largest <= device_memory_bytes ? "fits" : "does not fit");
  std::fprintf(out, "\n");
  MemorySpec sixteen = spec;
  sixteen.element_bytes = 2;
  sixteen.storage = DType::F32;  // the 16-bit prediction halves the fp32 layout
  const auto mib = [](double bytes) { return bytes / (1024.0 * 1024.0); };
  std::fprintf(out, "  one layer's activations, one microbatch: %.1f MiB in this layout (%.1f MiB at 16 bits); "
               "Korthikanti et al. (16-bit): %.1f MiB\n",
               mib(layer_activation_bytes(spec, *sizing)), mib(layer_activation_bytes(sixteen, *sizing)),
               mib(korthikanti_layer_activation_bytes(spec)));
}

// The same prediction as one JSON object on one line: bytes per category for every stage.
void print_memory_prediction_json(const TrainOptions& o, int element_bytes, std::FILE* out) {
  const MemorySpec spec = memory_spec_from(o, element_bytes);
  const std::unique_ptr<Backend> sizing = make_sizing_backend(spec);
  nlohmann::json stages = nlohmann::json::array();
  for (const RankMemory& r : predict_memory(spec, *sizing))
    stages.push_back({{"stage", r.stage}, {"weights", r.weights}, {"master_weights", r.master_weights},
                      {"gradients", r.gradients}, {"optimizer", r.optimizer}, {"activations", r.activations},
                      {"messages", r.messages}, {"scratch", r.scratch}, {"total", r.total()}});
  const nlohmann::json j = {{"unit", "bytes"}, {"element_bytes", element_bytes}, {"tp", spec.tp},
                            {"pp", spec.schedule.pp}, {"optimizer_shards", spec.optimizer_shards},
                            {"recompute", describe(spec.recompute)}, {"stages", stages}};
  std::fprintf(out, "%s\n", j.dump().c_str());
}

int memory_command(int argc, char** argv) {
  std::string storage = "fp32";
  double device_gb = 0;
  bool json = false;
  SubcommandOptions options(
      "memory", "--config FILE [--storage fp32|16bit] [--device-memory-gb N] [--json] [--section.key=value ...]",
      "Predicts each rank's training memory by category (weights, master weights, gradients, AdamW\n"
      "state, the activations and p2p buffers of the microbatches in flight, scratch) for the config's\n"
      "model, grid (--parallel.tp, --parallel.pp, and --parallel.dp with [train] distributed_optimizer),\n"
      "schedule and [train] recompute, before anything is allocated. The same model (parallel/memory_model.h) sizes the training arena of a run.");
  options.accept_train_keys("the `pipelane train` config to predict (its keys also as --section.key=value)");
  options.add_options()
      ("storage", value_with_default(&storage),
       "fp32: pipelane's storage; 16bit: the same layout at 2 bytes an element (a prediction)")
      ("device-memory-gb", value_with_default(&device_gb),
       "say whether the largest rank fits this many GB (10^9 bytes); 0: do not say")
      ("json", boost::program_options::bool_switch(&json),
       "print the prediction as one JSON object (bytes per category for every stage) instead of the table");
  const auto check = [&] {
    if (storage != "fp32" && storage != "16bit")
      throw OptionError("--storage " + storage + ": expected fp32 or 16bit");
    if (device_gb < 0) throw OptionError("--device-memory-gb must be >= 0");
  };
  if (const auto code = options.parse(argc, argv, check)) return *code;
  if (!options.has_train_arguments()) return options.usage_error("give --config FILE (or the model's keys)");
  try {
    if (json) print_memory_prediction_json(options.train_options(), storage == "fp32" ? 4 : 2, stdout);
    else print_memory_prediction(options.train_options(), storage == "fp32" ? 4 : 2, device_gb * 1e9, stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane memory: %s\n", e.what());
    return 1;
  }
}

}  // namespace pipelane
