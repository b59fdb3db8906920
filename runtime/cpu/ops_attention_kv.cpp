// KV-cache attention for inference (moved from the prefill lane): one sequence, positions
// [past, past + n) against every cached position up to each one.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

void attention_forward_kv(float* out, float* scores, const float* qkv, float* k_cache,
                          float* v_cache, int past, int n, int C, int NH) {
  const int hs = C / NH, total = past + n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int i = 0; i < n; ++i) {
    const float* row = qkv + static_cast<std::size_t>(i) * 3 * C;
    std::memcpy(k_cache + static_cast<std::size_t>(past + i) * C, row + C, C * sizeof(float));
    std::memcpy(v_cache + static_cast<std::size_t>(past + i) * C, row + 2 * C, C * sizeof(float));
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < NH; ++h) {
      const int pos = past + i;
      const float* q = qkv + static_cast<std::size_t>(i) * 3 * C + h * hs;
      float* sc = scores + (static_cast<std::size_t>(i) * NH + h) * total;
      float maxv = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        const float* k = k_cache + static_cast<std::size_t>(j) * C + h * hs;
        float dot = 0.f;
        for (int d = 0; d < hs; ++d) dot += q[d] * k[d];
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
        const float* v = v_cache + static_cast<std::size_t>(j) * C + h * hs;
        const float a = sc[j] * inv;
        for (int d = 0; d < hs; ++d) o[d] += a * v[d];
      }
    }
  }
}

}  // namespace pipelane::cpu
