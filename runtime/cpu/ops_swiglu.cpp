// SwiGLU's elementwise part: out = silu(gate) * up, silu(x) = x * sigmoid(x). sigmoid through the
// vectorised exp of fast_math.h (the exp of the softmax and GeLU).
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/fast_math.h"

namespace pipelane::cpu {

void swiglu_forward(float* out, const float* gate, const float* up, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float sig = 1.0f / (1.0f + exp_approx(-g));
    out[i] = g * sig * up[i];
  }
}

// d silu(g)/dg = sig * (1 + g * (1 - sig)).
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                     std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i], d = dout[i];
    const float sig = 1.0f / (1.0f + exp_approx(-g));
    const float silu = g * sig;
    dgate[i] = d * up[i] * sig * (1.0f + g * (1.0f - sig));
    dup[i] = d * silu;
  }
}

}  // namespace pipelane::cpu
