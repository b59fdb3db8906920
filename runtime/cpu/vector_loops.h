// The short vector loops of the attention kernels (dot product, y += a x), written for the
// compiler's vectoriser; shared so the MHA and GQA kernels run the same arithmetic.
#pragma once

namespace pipelane::cpu {

inline float dot(const float* a, const float* b, int n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float* y, float a, const float* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace pipelane::cpu
