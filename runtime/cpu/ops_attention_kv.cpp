// Causal attention of new positions against a KV cache: incremental decoding (one position at a
// time) and chunked prefill. One (position, head) pair per OpenMP task; each writes only its own
// head's columns of `out` and its own row of `scores`, so no races and no cross-thread reductions.
// The dot products and sums run in position order with std::exp, so the result does not depend on
// the thread count or on how the positions were chunked.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "runtime/ops.h"

namespace pipelane::cpu {

void attention_forward_kv(float* out, float* scores, const float* q, int q_stride, const float* kcache,
                          const float* vcache, int n, int pos0, int C, int NH) {
  const int hs = C / NH;
  const int span = pos0 + n;  // scores row length: every cached position a query may see
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < NH; ++h) {
      const int pos = pos0 + i;
      const float* qh = q + static_cast<std::size_t>(i) * q_stride + h * hs;
      float* sc = scores + (static_cast<std::size_t>(i) * NH + h) * span;
      float maxv = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        const float* k = kcache + static_cast<std::size_t>(j) * C + h * hs;
        float dot = 0.f;
        for (int d = 0; d < hs; ++d) dot += qh[d] * k[d];
        sc[j] = dot * scale;
        maxv = std::max(maxv, sc[j]);
      }
      float sum = 0.f;
      for (int j = 0; j <= pos; ++j) {
        sc[j] = std::exp(sc[j] - maxv);
        sum += sc[j];
      }
      const float inv = 1.0f / sum;
      float* o = out + static_cast<std::size_t>(i) * C + h * hs;
      for (int d = 0; d < hs; ++d) o[d] = 0.f;
      for (int j = 0; j <= pos; ++j) {
        const float* v = vcache + static_cast<std::size_t>(j) * C + h * hs;
        const float a = sc[j] * inv;
        for (int d = 0; d < hs; ++d) o[d] += a * v[d];
      }
    }
  }
}

}  // namespace pipelane::cpu
