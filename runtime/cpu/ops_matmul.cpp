#include <cblas.h>

#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      float* o = out + static_cast<std::size_t>(n) * OC;
#pragma omp simd
      for (int k = 0; k < OC; ++k) o[k] = bias[k];
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
              bias ? 1.0f : 0.0f, out, OC);
}

void matmul_backward_bias(float* dbias, const float* dout, int N, int OC) {
  constexpr int kSlice = 16;
  const int slices = (OC + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int k0 = s * kSlice, k1 = k0 + kSlice < OC ? k0 + kSlice : OC;
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<std::size_t>(n) * OC;
      for (int k = k0; k < k1; ++k) dbias[k] += d[k];
    }
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  if (dinp)  // dinp[N,C] = dout[N,OC] @ weight[OC,C]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                0.0f, dinp, C);
  // dweight[OC,C] += dout^T[OC,N] @ inp[N,C]
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
              dweight, C);
  if (dbias) matmul_backward_bias(dbias, dout, N, OC);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C,
                           int OC) {
  // dinp[N,C] = dout[N,OC] @ weight[OC,C], exactly matmul_backward's call
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
              0.0f, dinp, C);
}

void lm_head_logits(float* logits, const float* x, const float* wte, int N, int C, int Vp) {
  matmul_forward(logits, x, wte, nullptr, N, C, Vp);
}

}  // namespace pipelane::cpu
