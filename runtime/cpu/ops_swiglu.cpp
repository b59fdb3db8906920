// SwiGLU's elementwise part: out = silu(gate) * up, silu(x) = x * sigmoid(x). sigmoid through the
// vectorised exp of fast_math.h (the exp of the softmax and GeLU).
#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/fast_math.h"

namespace pipelane::cpu {

// Out: float, or std::uint16_t for a bf16 output (each value rounded as it is written).
template <typename Out>
void swiglu_forward_t(Out* out, const float* gate, const float* up, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float sig = 1.0f / (1.0f + exp_approx(-g));
    out[i] = stored_as<Out>(g * sig * up[i]);
  }
}

void swiglu_forward(ActivationOut out, const float* gate, const float* up, std::size_t n) {
  if (out.is_bf16()) swiglu_forward_t(out.bf16, gate, up, n);
  else swiglu_forward_t(out.f32, gate, up, n);
}

// d silu(g)/dg = sig * (1 + g * (1 - sig)). G, U: float, or std::uint16_t for a bf16 input (each
// value widened as it is read).
template <typename G, typename U>
void swiglu_backward_t(float* dgate, float* dup, const float* dout, const G* gate, const U* up, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float g = widened(gate[i]), d = dout[i];
    const float sig = 1.0f / (1.0f + exp_approx(-g));
    const float silu = g * sig;
    dgate[i] = d * widened(up[i]) * sig * (1.0f + g * (1.0f - sig));
    dup[i] = d * silu;
  }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, ActivationIn gate, ActivationIn up,
                     std::size_t n) {
  const auto with_gate = [&](const auto* g) {
    if (up.is_bf16()) swiglu_backward_t(dgate, dup, dout, g, up.bf16, n);
    else swiglu_backward_t(dgate, dup, dout, g, up.f32, n);
  };
  if (gate.is_bf16()) with_gate(gate.bf16);
  else with_gate(gate.f32);
}

}  // namespace pipelane::cpu
