// RMSNorm forward and backward (Llama), one warp per row as layernorm.cuh: rows are at most a few
// thousand channels, which one warp streams with every lane busy. fp32 arithmetic whatever the
// storage type, in the CPU op's order of operations (x * rstd first, then the weight); the weight
// gradient through the deterministic column sums of column_sums.cuh.
#pragma once
#include "runtime/cuda/cuda_ops_llama.h"
#include "runtime/cuda/kernels/column_sums.cuh"
#include "runtime/cuda/kernels/launch.cuh"

namespace pipelane::cuda {

constexpr int kRmsRowsPerBlock = 8;  // warps per block, one row each

template <typename floatX, typename outX>
__global__ void rmsnorm_forward_kernel(outX* out, float* rstd, const floatX* inp, const floatX* weight, int N,
                                       int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRmsRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp: no block barrier follows
  const floatX* x = inp + static_cast<std::size_t>(row) * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_float(x[c]);
    ss += v * v;
  }
  const float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  outX* o = out + static_cast<std::size_t>(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = from_float<outX>(to_float(weight[c]) * (to_float(x[c]) * r));
  if (lane == 0) rstd[row] = r;
}

template <typename floatX>
__global__ void rmsnorm_backward_input_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                              const floatX* weight, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRmsRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const std::size_t base = static_cast<std::size_t>(row) * C;
  const floatX* x = inp + base;
  const floatX* d = dout + base;
  const float r = rstd[row];
  float dot = 0.f;  // sum_c w * dy * x
  for (int c = lane; c < C; c += 32) dot += to_float(weight[c]) * to_float(d[c]) * to_float(x[c]);
  const float k = warp_sum(dot) / C * r * r;
  floatX* di = dinp + base;
  for (int c = lane; c < C; c += 32) {
    const float g = (to_float(weight[c]) * to_float(d[c]) - to_float(x[c]) * k) * r;
    di[c] = from_float<floatX>(to_float(di[c]) + g);
  }
}

// dweight's term: x * rstd * dy (the CPU op's order).
template <typename floatX>
struct RmsnormWeightTerm {
  const floatX* dout;
  const floatX* inp;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float (&t)[1]) const {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    t[0] = to_float(inp[i]) * rstd[n] * to_float(dout[i]);
  }
};

template <typename floatX, typename outX>
void rmsnorm_forward(outX* out, float* rstd, const floatX* inp, const floatX* weight, int N, int C, float eps,
                     cudaStream_t stream) {
  if (N <= 0) return;
  PIPELANE_LAUNCH((rmsnorm_forward_kernel<floatX, outX>), dim3(ceil_div(N, kRmsRowsPerBlock)),
                  dim3(32 * kRmsRowsPerBlock), 0, stream, out, rstd, inp, weight, N, C, eps);
}

template <typename floatX>
void rmsnorm_backward_input(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight,
                            const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0) return;
  PIPELANE_LAUNCH(rmsnorm_backward_input_kernel<floatX>, dim3(ceil_div(N, kRmsRowsPerBlock)),
                  dim3(32 * kRmsRowsPerBlock), 0, stream, dinp, dout, inp, weight, rstd, N, C);
}

template <typename floatX>
void rmsnorm_backward_params(float* dweight, const floatX* dout, const floatX* inp, const float* rstd, int N, int C,
                             float* scratch, cudaStream_t stream) {
  column_sums(ColumnOutputs<1>{{dweight}}, RmsnormWeightTerm<floatX>{dout, inp, rstd, C}, N, C, scratch, stream);
}

}  // namespace pipelane::cuda
