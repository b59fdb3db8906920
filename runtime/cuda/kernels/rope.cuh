// Rotary position embedding in place (Hugging Face's rotate-half: channel i of a head pairs with
// i + hs/2), one thread per pair over a grid-stride loop. Every element is written by exactly
// one thread and nothing is summed, so the bits do not depend on the grid; the same two products
// and one sum per output as the CPU op. The cos/sin table is fp32 whatever the storage type.
#pragma once
#include "runtime/cuda/cuda_ops_llama.h"
#include "runtime/cuda/kernels/elementwise.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

// Pair p of the B*T*heads*(hs/2) pairs: row n = p / (heads*half), head, index i in the half head.
template <typename floatX>
struct RopeRotate {
  floatX* x;
  const float* table;
  int T, pos0, heads, hs, ld;
  float sign;  // +1: the table's angle; -1: its negative (backward)
  __device__ void operator()(std::size_t p) const {
    const int half = hs / 2;
    const int i = static_cast<int>(p % half);
    const int h = static_cast<int>(p / half % heads);
    const std::size_t n = p / (static_cast<std::size_t>(half) * heads);
    const float* cs = table + static_cast<std::size_t>(pos0 + static_cast<int>(n % T)) * hs;
    floatX* a = x + n * ld + static_cast<std::size_t>(h) * hs + i;
    floatX* b = a + half;
    const float c = cs[i], s = sign * cs[half + i];
    const float x1 = to_float(*a), x2 = to_float(*b);
    *a = from_float<floatX>(x1 * c - x2 * s);
    *b = from_float<floatX>(x2 * c + x1 * s);
  }
};

template <typename floatX>
void rope_rotate(floatX* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld, bool inverse,
                 cudaStream_t stream) {
  if (B <= 0 || T <= 0 || heads <= 0 || hs < 2) return;
  const std::size_t pairs = static_cast<std::size_t>(B) * T * heads * (hs / 2);
  for_each_element(RopeRotate<floatX>{x, table, T, pos0, heads, hs, ld, inverse ? -1.0f : 1.0f}, pairs, stream);
}

}  // namespace pipelane::cuda
