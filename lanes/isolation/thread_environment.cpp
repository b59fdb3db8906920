#include "lanes/isolation/thread_environment.h"

#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define PIPELANE_HAVE_MXCSR 1
#endif

// Weak: the lanes library does not insist on OpenBLAS (a CUDA-only build may not link it).
extern "C" int openblas_get_num_threads(void) __attribute__((weak));
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace pipelane {

ThreadEnvironment ThreadEnvironment::capture() {
  ThreadEnvironment e;
  std::fegetenv(&e.fenv_);
  e.rounding_ = std::fegetround();
#ifdef PIPELANE_HAVE_MXCSR
  e.mxcsr_ = _mm_getcsr();
#endif
  e.omp_threads_ = omp_get_max_threads();
  e.omp_dynamic_ = omp_get_dynamic();
  e.omp_max_active_levels_ = omp_get_max_active_levels();
  if (openblas_get_num_threads) e.blas_threads_ = openblas_get_num_threads();
  return e;
}

bool ThreadEnvironment::restore() const {
  bool changed = false;
  // The rounding mode and (below) MXCSR's control bits: fenv_t also holds sticky exception flags,
  // which any call may raise and which mean nothing to training.
  if (std::fegetround() != rounding_) changed = true;
#ifdef PIPELANE_HAVE_MXCSR
  // Control bits only (rounding, masks, FTZ, DAZ); the low six are sticky exception flags.
  constexpr unsigned kControl = ~0x3Fu;
  if ((_mm_getcsr() & kControl) != (mxcsr_ & kControl)) changed = true;
#endif
  std::fesetenv(&fenv_);
#ifdef PIPELANE_HAVE_MXCSR
  _mm_setcsr(mxcsr_);  // after fesetenv, which need not restore FTZ/DAZ
#endif
  if (omp_get_max_threads() != omp_threads_) {
    omp_set_num_threads(omp_threads_);
    changed = true;
  }
  if (omp_get_dynamic() != omp_dynamic_) {
    omp_set_dynamic(omp_dynamic_);
    changed = true;
  }
  if (omp_get_max_active_levels() != omp_max_active_levels_) {
    omp_set_max_active_levels(omp_max_active_levels_);
    changed = true;
  }
  if (blas_threads_ > 0 && openblas_get_num_threads() != blas_threads_) {
    openblas_set_num_threads(blas_threads_);
    changed = true;
  }
  return changed;
}

}  // namespace pipelane
