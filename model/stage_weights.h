// The weights a stage's passes read (GptStage's forward and backward take a StageWeights).
//
// Three layouts, one interface:
//   - fp32 parameters alone, in the layout's flat buffer (the default; implicit from const float*);
//   - plus a bf16 copy in the same layout (`[train] gemm_weights = bf16`), which every GEMM reads
//     in place of rounding the fp32 weight (GemmWeight: the same values, so the same bits);
//   - the bf16 copy plus the fp32 values of only the tensors the passes read outside a GEMM
//     (Fp32Reads: norms, biases, the embedding lookup, positions), packed in a small buffer. The
//     distributed optimizer with bf16 GEMM weights runs so: its fp32 masters are sharded over dp and
//     no rank holds the whole fp32 model (Megatron-LM's 2 + 4 + 12/dp bytes a parameter).
// A GEMM's weight comes from gemm(), everything else from fp32(); a pass that asked fp32() for a
// tensor read only by GEMMs under the third layout is a bug in the pass, and throws.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/gpt_layout.h"
#include "runtime/backend.h"

namespace pipelane {

// Where the tensors read outside GEMMs sit in their packed fp32 buffer.
struct Fp32Reads {
  struct Tensor {
    std::size_t flat = 0, numel = 0;  // in the layout's flat buffer
    std::size_t packed = 0;           // in the packed buffer
  };
  std::vector<Tensor> tensors;  // by flat offset
  std::size_t floats = 0;       // the packed buffer's size

  // The tensors of `layout` a stage's passes read outside GEMMs: every one but the GEMM weights
  // (q/k/v, the projections, the MLP's matrices, an untied head; a tied embedding read only by the
  // head, on a last stage without the embedding, too).
  static Fp32Reads of(const ParamLayout& layout);
  // Where element `flat` of the layout is in the packed buffer; std::logic_error when no packed
  // tensor holds it.
  std::size_t packed_at(std::size_t flat) const;
};

struct StageWeights {
  const float* f32 = nullptr;           // the whole flat buffer, or the packed one (fp32_reads)
  const std::uint16_t* bf16 = nullptr;  // the bf16 copy, whole, or null
  const Fp32Reads* fp32_reads = nullptr;
  StageWeights(const float* params) : f32(params) {}  // NOLINT(google-explicit-constructor)
  StageWeights(const float* params, const std::uint16_t* params_bf16) : f32(params), bf16(params_bf16) {}
  StageWeights(const float* packed, const std::uint16_t* params_bf16, const Fp32Reads* reads)
      : f32(packed), bf16(params_bf16), fp32_reads(reads) {}
  // The tensor at `offset` (in elements) as a GEMM's weight.
  GemmWeight gemm(std::size_t offset) const {
    return bf16 ? GemmWeight::of_bf16(bf16 + offset) : GemmWeight(f32 + offset);
  }
  // Element `offset` of the flat layout in fp32 (the rest of its tensor follows it).
  const float* fp32(std::size_t offset) const { return f32 + (fp32_reads ? fp32_reads->packed_at(offset) : offset); }
  // The same, null for npos (a tensor the config lacks, such as a bias under bias = none).
  const float* fp32_or_null(std::size_t offset) const {
    return offset == ParamLayout::npos ? nullptr : fp32(offset);
  }
};

}  // namespace pipelane
