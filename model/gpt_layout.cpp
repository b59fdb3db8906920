#include "model/gpt_layout.h"

#include <cmath>
#include <stdexcept>

#include "runtime/arena.h"

namespace pipelane {

ParamLayout::ParamLayout(const GptConfig& cfg, StageRange range) : cfg_(cfg), range_(range) {
  if (const std::string p = cfg.problem(); !p.empty()) throw std::invalid_argument("GptConfig: " + p);
  if (range.first_layer < 0 || range.last_layer > cfg.layers || range.first_layer > range.last_layer)
    throw std::invalid_argument("StageRange: layers [" + std::to_string(range.first_layer) + ", " +
                                std::to_string(range.last_layer) + ") outside the model's " +
                                std::to_string(cfg.layers));
  const std::int64_t C = cfg.d_model, Vp = cfg.padded_vocab();
  const float std_w = 0.02f;
  // GPT-2 scales the init of projections into the residual stream by 1/sqrt(2 * layers).
  const float std_resid = 0.02f / std::sqrt(2.0f * cfg.layers);
  if (range.has_embedding || range.has_head) wte = add("wte", {Vp, C}, true, std_w);
  if (range.has_embedding) wpe = add("wpe", {cfg.max_seq_len, C}, true, std_w);
  for (int l = range.first_layer; l < range.last_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.ln1w = add(h + "ln_1.weight", {C}, false, 0.f, 1.f);
    o.ln1b = add(h + "ln_1.bias", {C}, false, 0.f);
    o.qkvw = add(h + "attn.c_attn.weight", {3 * C, C}, true, std_w);
    o.qkvb = add(h + "attn.c_attn.bias", {3 * C}, false, 0.f);
    o.attprojw = add(h + "attn.c_proj.weight", {C, C}, true, std_resid);
    o.attprojb = add(h + "attn.c_proj.bias", {C}, false, 0.f);
    o.ln2w = add(h + "ln_2.weight", {C}, false, 0.f, 1.f);
    o.ln2b = add(h + "ln_2.bias", {C}, false, 0.f);
    o.fcw = add(h + "mlp.c_fc.weight", {4 * C, C}, true, std_w);
    o.fcb = add(h + "mlp.c_fc.bias", {4 * C}, false, 0.f);
    o.fcprojw = add(h + "mlp.c_proj.weight", {C, 4 * C}, true, std_resid);
    o.fcprojb = add(h + "mlp.c_proj.bias", {C}, false, 0.f);
    layers.push_back(o);
  }
  if (range.has_head) {
    lnfw = add("ln_f.weight", {C}, false, 0.f, 1.f);
    lnfb = add("ln_f.bias", {C}, false, 0.f);
  }
}

std::size_t ParamLayout::add(std::string name, std::vector<std::int64_t> shape, bool decay,
                             float std, float value) {
  ParamEntry e;
  e.name = std::move(name);
  e.shape = std::move(shape);
  e.numel = 1;
  for (auto d : e.shape) e.numel *= static_cast<std::size_t>(d);
  e.offset = total_;
  e.decay = decay;
  e.init_std = std;
  e.init_value = value;
  // Keep every tensor 64-byte aligned so vector loads never straddle tensors.
  total_ += align_up(e.numel, 16);
  entries_.push_back(std::move(e));
  return entries_.back().offset;
}

const ParamEntry* ParamLayout::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace pipelane
