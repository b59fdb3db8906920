#include "model/recompute.h"

#include <algorithm>
#include <stdexcept>

namespace pipelane {

RecomputeKind parse_recompute_kind(const std::string& name) {
  if (name == "none") return RecomputeKind::None;
  if (name == "selective") return RecomputeKind::Selective;
  if (name == "full") return RecomputeKind::Full;
  throw std::invalid_argument("recompute '" + name + "': expected none, selective or full");
}

RecomputeMethod parse_recompute_method(const std::string& name) {
  if (name == "uniform") return RecomputeMethod::Uniform;
  if (name == "block") return RecomputeMethod::Block;
  throw std::invalid_argument("recompute_method '" + name + "': expected uniform or block");
}

const char* recompute_kind_name(RecomputeKind kind) {
  switch (kind) {
    case RecomputeKind::None: return "none";
    case RecomputeKind::Selective: return "selective";
    case RecomputeKind::Full: return "full";
  }
  return "?";
}

const char* recompute_method_name(RecomputeMethod method) {
  return method == RecomputeMethod::Block ? "block" : "uniform";
}

std::string describe(const RecomputeOptions& o) {
  if (o.kind != RecomputeKind::Full) return recompute_kind_name(o.kind);
  return std::string("full (") + recompute_method_name(o.method) + ", " + std::to_string(o.layers) +
         (o.layers == 1 ? " layer)" : " layers)");
}

std::vector<LayerRecompute> plan_recompute(const RecomputeOptions& o, int num_layers) {
  if (o.layers < 1) throw std::invalid_argument("recompute_layers = " + std::to_string(o.layers) + ": expected >= 1");
  std::vector<LayerRecompute> plan(static_cast<std::size_t>(std::max(0, num_layers)));
  for (int l = 0; l < num_layers; ++l) {
    LayerRecompute& p = plan[l];
    p.group_first = p.group_last = l;
    if (o.kind == RecomputeKind::Selective) p.keeps = LayerKeeps::AllButAttentionCore;
    if (o.kind != RecomputeKind::Full) continue;
    if (o.method == RecomputeMethod::Block) {
      if (l < o.layers) p.keeps = LayerKeeps::Output;
      continue;
    }
    p.keeps = LayerKeeps::Output;
    p.group_first = l / o.layers * o.layers;
    p.group_last = std::min(num_layers, p.group_first + o.layers) - 1;
  }
  return plan;
}

int recompute_workspace_layers(const std::vector<LayerRecompute>& plan) {
  int most = 0;
  for (const LayerRecompute& p : plan)
    if (p.keeps == LayerKeeps::Output) most = std::max(most, p.group_last - p.group_first + 1);
  return most;
}

}  // namespace pipelane
