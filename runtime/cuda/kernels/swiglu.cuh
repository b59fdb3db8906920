// SwiGLU's elementwise part, out = silu(gate) * up with silu(g) = g * sigmoid(g), and its
// gradient, as grid-stride loops; fp32 arithmetic in the CPU op's order. The sigmoid's exp is the
// device's expf (the CPU op's is a vectorised exp within 2e-7: both are a few ulp from exp).
#pragma once
#include "runtime/cuda/cuda_ops_llama.h"
#include "runtime/cuda/kernels/elementwise.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

template <typename floatX>
struct SwigluForward {
  floatX* out;
  const floatX* gate;
  const floatX* up;
  __device__ void operator()(std::size_t i) const {
    const float g = to_float(gate[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    out[i] = from_float<floatX>(g * sig * to_float(up[i]));
  }
};

// d silu(g)/dg = sig * (1 + g * (1 - sig)).
template <typename floatX>
struct SwigluBackward {
  floatX* dgate;
  floatX* dup;
  const floatX* dout;
  const floatX* gate;
  const floatX* up;
  __device__ void operator()(std::size_t i) const {
    const float g = to_float(gate[i]), d = to_float(dout[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dgate[i] = from_float<floatX>(d * to_float(up[i]) * sig * (1.0f + g * (1.0f - sig)));
    dup[i] = from_float<floatX>(d * (g * sig));
  }
};

template <typename floatX>
void swiglu_forward(floatX* out, const floatX* gate, const floatX* up, std::size_t n, cudaStream_t stream) {
  for_each_element(SwigluForward<floatX>{out, gate, up}, n, stream);
}
template <typename floatX>
void swiglu_backward(floatX* dgate, floatX* dup, const floatX* dout, const floatX* gate, const floatX* up,
                     std::size_t n, cudaStream_t stream) {
  for_each_element(SwigluBackward<floatX>{dgate, dup, dout, gate, up}, n, stream);
}

}  // namespace pipelane::cuda
