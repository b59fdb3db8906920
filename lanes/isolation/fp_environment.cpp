#include "lanes/isolation/fp_environment.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define PIPELANE_HAVE_MXCSR 1
#endif

namespace pipelane {

FloatingPointEnvironment FloatingPointEnvironment::capture() {
  FloatingPointEnvironment e;
  std::fegetenv(&e.fenv_);
  e.rounding_ = std::fegetround();
#ifdef PIPELANE_HAVE_MXCSR
  e.mxcsr_ = _mm_getcsr();
#endif
  return e;
}

bool FloatingPointEnvironment::restore() const {
  bool changed = std::fegetround() != rounding_;
#ifdef PIPELANE_HAVE_MXCSR
  // Control bits only (rounding, masks, FTZ, DAZ); the low six are sticky exception flags.
  constexpr unsigned kControl = ~0x3Fu;
  if ((_mm_getcsr() & kControl) != (mxcsr_ & kControl)) changed = true;
#endif
  std::fesetenv(&fenv_);
#ifdef PIPELANE_HAVE_MXCSR
  _mm_setcsr(mxcsr_);  // after fesetenv, which need not restore FTZ/DAZ
#endif
  return changed;
}

}  // namespace pipelane
