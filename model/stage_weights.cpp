#include "model/stage_weights.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

namespace pipelane {

Fp32Reads Fp32Reads::of(const ParamLayout& layout) {
  std::set<std::size_t> gemm_only;
  for (const LayerOffsets& o : layout.layers)
    for (std::size_t w : {o.qkvw, o.kw, o.vw, o.attprojw, o.gatew, o.fcw, o.fcprojw})
      if (w != ParamLayout::npos) gemm_only.insert(w);
  // The head reads its weight by GEMM; a tied one is also the lookup's table where the stage embeds.
  if (layout.head != ParamLayout::npos && !(layout.head == layout.wte && layout.range().has_embedding))
    gemm_only.insert(layout.head);
  Fp32Reads out;
  for (const ParamEntry& e : layout.entries()) {
    if (gemm_only.count(e.offset)) continue;
    out.tensors.push_back({e.offset, e.numel, out.floats});
    out.floats += e.numel;
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const Tensor& a, const Tensor& b) { return a.flat < b.flat; });
  return out;
}

std::size_t Fp32Reads::packed_at(std::size_t flat) const {
  auto it = std::upper_bound(tensors.begin(), tensors.end(), flat,
                             [](std::size_t f, const Tensor& t) { return f < t.flat; });
  if (it != tensors.begin()) {
    --it;
    if (flat < it->flat + it->numel) return it->packed + (flat - it->flat);
  }
  throw std::logic_error("StageWeights: element " + std::to_string(flat) +
                         " is read only by GEMMs; its fp32 value is not kept with sharded master weights");
}

}  // namespace pipelane
