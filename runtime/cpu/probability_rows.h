// The attention's saved probabilities ([B*heads] blocks of [T,T]) in an fp32 or a bf16 buffer
// (ActivationOut/In, runtime/backend.h), for the CPU kernels templated on the element type P: an
// fp32 buffer's rows are computed and read in place, as they always were; a bf16 buffer's row is
// computed in an fp32 row of its own and rounded into the buffer once complete, and widened into
// one before it is read (bf16_round.h's fp32_row). The arithmetic is then the fp32 buffer's, on the values each buffer
// holds. (The fp32 instances keep the kernels' code as it was: the compiler's code for them, and
// so their bits, do not change.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "runtime/cpu/bf16_round.h"

namespace pipelane::cpu {

// Where a row is computed: nothing for an fp32 buffer (the row itself), an fp32 row for bf16. (A
// row of the attention's output [.., hs] in a bf16 buffer is computed the same way.)
template <typename P>
struct ComputedRow {
  explicit ComputedRow(int) {}
  float* at(P* row) { return row; }
  void store(P*, int) {}
};
template <>
struct ComputedRow<std::uint16_t> {
  explicit ComputedRow(int T) : row(static_cast<std::size_t>(T)) {}
  float* at(std::uint16_t*) { return row.data(); }
  // The complete row (n values), rounded into the buffer.
  void store(std::uint16_t* out, int n) {
    for (int j = 0; j < n; ++j) out[j] = bf16_bits(row[j]);
  }
  std::vector<float> row;
};

}  // namespace pipelane::cpu
