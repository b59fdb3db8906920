// Elementwise ops (GeLU, adds, scaling, bias) as grid-stride loops, and the linear layer's bias
// gradient. Arithmetic in fp32, in the CPU op's order; GeLU's tanh is the device's tanhf (the CPU
// op uses a polynomial; both are within a few ulp of tanh).
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/column_sums.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kElementwiseThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

// Applies f(i) for every i < n.
template <typename F>
__global__ void elementwise_kernel(F f, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    f(i);
}

template <typename F>
void for_each_element(F f, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  PIPELANE_LAUNCH(elementwise_kernel<F>, dim3(elementwise_blocks(n, kElementwiseThreads)),
                  dim3(kElementwiseThreads), 0, stream, f, n);
}

template <typename floatX>
struct GeluForward {
  floatX* out;
  const floatX* inp;
  __device__ void operator()(std::size_t i) const {
    const float x = to_float(inp[i]);
    out[i] =
        from_float<floatX>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
};

template <typename floatX>
struct GeluBackward {
  floatX* dinp;
  const floatX* inp;
  const floatX* dout;
  __device__ void operator()(std::size_t i) const {
    const float x = to_float(inp[i]);
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float local =
        0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = from_float<floatX>(local * to_float(dout[i]));
  }
};

template <typename floatX>
struct AddForward {
  floatX* out;
  const floatX* a;
  const floatX* b;
  __device__ void operator()(std::size_t i) const {
    out[i] = from_float<floatX>(to_float(a[i]) + to_float(b[i]));
  }
};

template <typename floatX>
struct AddInplace {
  floatX* acc;
  const floatX* x;
  __device__ void operator()(std::size_t i) const {
    acc[i] = from_float<floatX>(to_float(acc[i]) + to_float(x[i]));
  }
};

template <typename floatX>
struct ScaleInplace {
  floatX* x;
  float s;
  __device__ void operator()(std::size_t i) const { x[i] = from_float<floatX>(to_float(x[i]) * s); }
};

template <typename floatX>
struct AddBias {
  floatX* out;
  const floatX* bias;
  int C;
  __device__ void operator()(std::size_t i) const {
    out[i] = from_float<floatX>(to_float(out[i]) + to_float(bias[i % C]));
  }
};

template <typename floatX>
struct BiasGradTerm {
  const floatX* dout;
  int OC;
  __device__ void operator()(int n, int c, float (&t)[1]) const {
    t[0] = to_float(dout[static_cast<std::size_t>(n) * OC + c]);
  }
};

template <typename floatX>
struct ConvertFromFloat {
  floatX* out;
  const float* in;
  __device__ void operator()(std::size_t i) const { out[i] = from_float<floatX>(in[i]); }
};

template <typename floatX>
struct ConvertToFloat {
  float* out;
  const floatX* in;
  __device__ void operator()(std::size_t i) const { out[i] = to_float(in[i]); }
};

// x[i] rounded to bf16 (nearest even) and kept in fp32: bf16 storage's values without storing.
struct RoundToBf16 {
  float* x;
  __device__ void operator()(std::size_t i) const { x[i] = to_float(from_float<__nv_bfloat16>(x[i])); }
};

template <typename floatX>
void convert_from_float(floatX* out, const float* in, std::size_t n, cudaStream_t stream) {
  for_each_element(ConvertFromFloat<floatX>{out, in}, n, stream);
}
template <typename floatX>
void convert_to_float(float* out, const floatX* in, std::size_t n, cudaStream_t stream) {
  for_each_element(ConvertToFloat<floatX>{out, in}, n, stream);
}
template <typename floatX>
void gelu_forward(floatX* out, const floatX* inp, std::size_t n, cudaStream_t stream) {
  for_each_element(GeluForward<floatX>{out, inp}, n, stream);
}
template <typename floatX>
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, std::size_t n,
                   cudaStream_t stream) {
  for_each_element(GeluBackward<floatX>{dinp, inp, dout}, n, stream);
}
template <typename floatX>
void add_forward(floatX* out, const floatX* a, const floatX* b, std::size_t n,
                 cudaStream_t stream) {
  for_each_element(AddForward<floatX>{out, a, b}, n, stream);
}
template <typename floatX>
void add_inplace(floatX* acc, const floatX* x, std::size_t n, cudaStream_t stream) {
  for_each_element(AddInplace<floatX>{acc, x}, n, stream);
}
template <typename floatX>
void scale_inplace(floatX* x, float s, std::size_t n, cudaStream_t stream) {
  for_each_element(ScaleInplace<floatX>{x, s}, n, stream);
}
template <typename floatX>
void add_bias(floatX* out, const floatX* bias, int N, int C, cudaStream_t stream) {
  if (C <= 0) return;
  for_each_element(AddBias<floatX>{out, bias, C}, static_cast<std::size_t>(N) * C, stream);
}
template <typename floatX>
void matmul_backward_bias(float* dbias, const floatX* dout, int N, int OC, float* scratch,
                          cudaStream_t stream) {
  column_sums(ColumnOutputs<1>{{dbias}}, BiasGradTerm<floatX>{dout, OC}, N, OC, scratch, stream);
}

}  // namespace pipelane::cuda
