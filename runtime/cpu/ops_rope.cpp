// Rotary position embedding in place (Hugging Face's rotate-half: the pair of channel i is
// i + hs/2 within each head). The cos/sin table is the caller's, computed once per stage.
// Every element is written by one iteration: no reductions, the same bits for any thread count.
#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

namespace {
// sign = +1 rotates by the table's angle, -1 by its negative (the transpose, for backward).
void rope_rotate(float* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld, float sign) {
  const int half = hs / 2;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * T; ++n) {
    const float* cs = table + static_cast<std::size_t>(pos0 + n % T) * hs;
    float* row = x + static_cast<std::size_t>(n) * ld;
    for (int h = 0; h < heads; ++h) {
      float* a = row + static_cast<std::size_t>(h) * hs;
      float* b = a + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float c = cs[i], s = sign * cs[half + i];
        const float x1 = a[i], x2 = b[i];
        a[i] = x1 * c - x2 * s;
        b[i] = x2 * c + x1 * s;
      }
    }
  }
}
}  // namespace

void rope_forward(float* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld) {
  rope_rotate(x, table, B, T, pos0, heads, hs, ld, 1.0f);
}

void rope_backward(float* dx, const float* table, int B, int T, int pos0, int heads, int hs, int ld) {
  rope_rotate(dx, table, B, T, pos0, heads, hs, ld, -1.0f);
}

}  // namespace pipelane::cpu
