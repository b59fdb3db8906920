#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

double measure_sgemm_gflops(int n, int reps) {
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn, 0.f);
  double best = 0.0;
  for (int r = 0; r < reps + 1; ++r) {  // the first product warms caches and thread pools
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * n * n * static_cast<double>(n) / s / 1e9);
  }
  return best;
}

}  // namespace pipelane::cpu
