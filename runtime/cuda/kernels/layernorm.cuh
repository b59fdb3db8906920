// Layernorm forward and backward, one warp per row (rows are short: C is at most a few thousand,
// so one warp streams a row from L1/L2 with every lane busy). Arithmetic in fp32 whatever the
// storage type, in the CPU op's order of operations; eps 1e-5 as PyTorch.
#pragma once
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/kernels/column_sums.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr float kLayernormEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps per block, one row each

template <typename floatX, typename outX>
__global__ void layernorm_forward_kernel(outX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp: no block barrier follows
  const floatX* x = inp + static_cast<std::size_t>(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += to_float(x[c]);
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(x[c]) - m;
    v += d * d;
  }
  const float r = 1.0f / sqrtf(warp_sum(v) / C + kLayernormEps);
  outX* o = out + static_cast<std::size_t>(row) * C;
  for (int c = lane; c < C; c += 32)
    o[c] = from_float<outX>((to_float(x[c]) - m) * r * to_float(weight[c]) + to_float(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename floatX>
__global__ void layernorm_backward_input_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                const floatX* weight, const float* mean,
                                                const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const std::size_t base = static_cast<std::size_t>(row) * C;
  const floatX* x = inp + base;
  const floatX* d = dout + base;
  const float m = mean[row], r = rstd[row];
  float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dn = to_float(weight[c]) * to_float(d[c]);
    dnorm_mean += dn;
    dnorm_norm_mean += dn * (to_float(x[c]) - m) * r;
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  floatX* di = dinp + base;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (to_float(x[c]) - m) * r;
    const float g =
        (to_float(weight[c]) * to_float(d[c]) - dnorm_mean - xhat * dnorm_norm_mean) * r;
    di[c] = from_float<floatX>(to_float(di[c]) + g);
  }
}

// The two terms of the parameter gradients: xhat * dout (dweight) and dout (dbias).
template <typename floatX>
struct LayernormParamTerms {
  const floatX* dout;
  const floatX* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float (&t)[2]) const {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    const float d = to_float(dout[i]);
    t[0] = (to_float(inp[i]) - mean[n]) * rstd[n] * d;
    t[1] = d;
  }
};

template <typename floatX, typename outX>
void layernorm_forward(outX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C,
                       cudaStream_t stream) {
  if (N <= 0) return;
  PIPELANE_LAUNCH((layernorm_forward_kernel<floatX, outX>), dim3(ceil_div(N, kRowsPerBlock)),
                  dim3(32 * kRowsPerBlock), 0, stream, out, mean, rstd, inp, weight, bias, N, C);
}

template <typename floatX>
void layernorm_backward_input(floatX* dinp, const floatX* dout, const floatX* inp,
                              const floatX* weight, const float* mean, const float* rstd, int N,
                              int C, cudaStream_t stream) {
  if (N <= 0) return;
  PIPELANE_LAUNCH(layernorm_backward_input_kernel<floatX>, dim3(ceil_div(N, kRowsPerBlock)),
                  dim3(32 * kRowsPerBlock), 0, stream, dinp, dout, inp, weight, mean, rstd, N, C);
}

template <typename floatX>
void layernorm_backward_params(float* dweight, float* dbias, const floatX* dout, const floatX* inp,
                               const float* mean, const float* rstd, int N, int C, float* scratch,
                               cudaStream_t stream) {
  column_sums(ColumnOutputs<2>{{dweight, dbias}},
              LayernormParamTerms<floatX>{dout, inp, mean, rstd, C}, N, C, scratch, stream);
}

template <typename floatX>
void layernorm_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t stream) {
  layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C, stream);
  layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C, scratch, stream);
}

}  // namespace pipelane::cuda
