// Activation recomputation (Korthikanti et al. 2022, Megatron-LM's --recompute-granularity):
// which layers of a stage keep what forward produced, and which rebuild it in backward.
//   none       every layer keeps all of its activations (the default; nothing changes)
//   selective  every layer drops the attention core's saved state (the softmax probabilities,
//              [B, heads, T, T] on the CPU backend) and recomputes it from q, k and v right
//              before the attention backward
//   full       layers keep only their input (the previous layer's output) and rerun their forward
//              before their backward. method = uniform: the stage's layers in groups of `layers`,
//              each group keeping only its input and recomputed together; block: only the first
//              `layers` layers of the stage, each on its own, the rest keeping everything
// Recomputation reruns the same kernels on the same inputs in the same order, so losses and
// gradients are bit-identical to none; only memory (less) and time (one more forward) change.
#pragma once
#include <string>
#include <vector>

namespace pipelane {

enum class RecomputeKind { None, Selective, Full };
enum class RecomputeMethod { Uniform, Block };

struct RecomputeOptions {
  RecomputeKind kind = RecomputeKind::None;
  RecomputeMethod method = RecomputeMethod::Uniform;
  int layers = 1;  // full: group size (uniform) or layers recomputed per stage (block); >= 1
  friend bool operator==(const RecomputeOptions&, const RecomputeOptions&) = default;
};

// "none" | "selective" | "full", "uniform" | "block"; std::invalid_argument naming the value otherwise.
RecomputeKind parse_recompute_kind(const std::string& name);
RecomputeMethod parse_recompute_method(const std::string& name);
const char* recompute_kind_name(RecomputeKind kind);
const char* recompute_method_name(RecomputeMethod method);
// "none", "selective", "full (uniform, 2 layers)": for headers and reports.
std::string describe(const RecomputeOptions& options);

// What one layer of a stage keeps.
enum class LayerKeeps {
  Everything,  // recompute none, or a layer full recompute's block method leaves alone
  AllButAttentionCore,  // selective
  Output,      // full: its output only when it ends its group, nothing otherwise
};

struct LayerRecompute {
  LayerKeeps keeps = LayerKeeps::Everything;
  // Full only: the group of layers [group_first, group_last] (indices within the stage) rerun
  // together from group_first's input.
  int group_first = 0, group_last = 0;
  bool ends_group(int layer) const { return layer == group_last; }
};

// The plan for a stage of `num_layers` layers; std::invalid_argument for layers < 1.
std::vector<LayerRecompute> plan_recompute(const RecomputeOptions& options, int num_layers);
// Layers a full-recompute workspace must hold at once: the largest group (0 without full).
int recompute_workspace_layers(const std::vector<LayerRecompute>& plan);

}  // namespace pipelane
