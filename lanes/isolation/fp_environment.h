// The floating-point environment a lane must not carry over into training or into its next call:
// the rounding mode, exception masks, and on x86 MXCSR's flush-to-zero and denormals-are-zero bits
// (training runs with them ON). capture() takes a snapshot of the calling thread's; restore() puts
// back whatever differs. (Thread counts need no such care: every backend op sets its own.)
#pragma once
#include <cfenv>

namespace pipelane {

class FloatingPointEnvironment {
 public:
  static FloatingPointEnvironment capture();
  // Puts this thread's floating-point environment back to the snapshot. True if it had changed
  // (sticky exception flags aside: any call may raise those, and they mean nothing to training).
  bool restore() const;

 private:
  std::fenv_t fenv_{};
  int rounding_ = FE_TONEAREST;
  unsigned mxcsr_ = 0;  // x86 only: fenv_t does not promise to carry FTZ/DAZ
};

}  // namespace pipelane
