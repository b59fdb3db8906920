// The per-thread state a lane must not carry over into training or into the next lane call: the
// floating-point environment (rounding mode, exception masks, and on x86 MXCSR's flush-to-zero and
// denormals-are-zero bits, which training runs with ON) and the OpenMP/OpenBLAS thread settings.
// capture() takes a snapshot; restore() puts back whatever differs.
#pragma once
#include <cfenv>

namespace pipelane {

class ThreadEnvironment {
 public:
  static ThreadEnvironment capture();
  // Puts this thread's floating-point environment and OpenMP settings, and the process-wide
  // OpenBLAS thread count, back to the snapshot. Returns true if anything had changed.
  bool restore() const;

  int omp_threads() const { return omp_threads_; }

 private:
  std::fenv_t fenv_{};
  int rounding_ = FE_TONEAREST;
  unsigned mxcsr_ = 0;  // x86 only: fenv_t does not promise to carry FTZ/DAZ
  int omp_threads_ = 1;
  int omp_dynamic_ = 0;
  int omp_max_active_levels_ = 1;
  int blas_threads_ = 0;  // 0: OpenBLAS is not linked
};

}  // namespace pipelane
