// Where every parameter of one stage lives in its flat buffer (llm.c style: one allocation, a size
// table). Gradients and AdamW moments use the same layout. Names follow Hugging Face's GPT-2
// ("h.3.attn.c_attn.weight") with global layer numbers, so a tensor has the same name on whichever
// stage holds it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_config.h"

namespace pipelane {

struct ParamEntry {
  std::string name;
  std::size_t offset = 0;  // in floats
  std::vector<std::int64_t> shape;
  std::size_t numel = 0;
  bool decay = false;  // AdamW weight decay applies to matrices and embeddings only
  float init_std = 0;  // 0: constant init (init_value)
  float init_value = 0;
};

struct LayerOffsets {
  std::size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

class ParamLayout {
 public:
  ParamLayout(const GptConfig& cfg, StageRange range);

  const std::vector<ParamEntry>& entries() const { return entries_; }
  std::size_t total_floats() const { return total_; }
  const ParamEntry* find(const std::string& name) const;  // null when this stage lacks it
  const GptConfig& config() const { return cfg_; }
  const StageRange& range() const { return range_; }

  // Offsets for the hot path; npos where this stage does not hold the tensor.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t wte = npos, wpe = npos, lnfw = npos, lnfb = npos;
  std::vector<LayerOffsets> layers;  // index 0 is range.first_layer

 private:
  std::size_t add(std::string name, std::vector<std::int64_t> shape, bool decay, float std,
                  float value = 0.f);
  GptConfig cfg_;
  StageRange range_;
  std::vector<ParamEntry> entries_;
  std::size_t total_ = 0;
};

}  // namespace pipelane
