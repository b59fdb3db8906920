#include <cmath>

#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

namespace {
constexpr float kEps = 1e-5f;
constexpr int kSlice = 16;  // channels per thread-owned slice in parameter-gradient reductions
}  // namespace

// Out: float, or std::uint16_t for a bf16 output (each value rounded as it is written).
template <typename Out>
void layernorm_forward_t(Out* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += x[c];
    const float m = s / C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(v / C + kEps);
    Out* o = out + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = stored_as<Out>((x[c] - m) * r * weight[c] + bias[c]);
    mean[n] = m;
    rstd[n] = r;
  }
}

void layernorm_forward(ActivationOut out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  if (out.is_bf16()) layernorm_forward_t(out.bf16, mean, rstd, inp, weight, bias, N, C);
  else layernorm_forward_t(out.f32, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C);
  layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C);
}

// The two halves of layernorm_backward (zero-bubble schedules run them at different times):
// layernorm_backward is exactly the one followed by the other.
void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, int N,
                              int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* d = dout + static_cast<std::size_t>(n) * C;
    const float m = mean[n], r = rstd[n];
    float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int c = 0; c < C; ++c) {
      const float dn = weight[c] * d[c];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * (x[c] - m) * r;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    float* di = dinp + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * r;
      di[c] += (weight[c] * d[c] - dnorm_mean - xhat * dnorm_norm_mean) * r;
    }
  }
}

void layernorm_backward_params(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C) {
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = c0 + kSlice < C ? c0 + kSlice : C;
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<std::size_t>(n) * C;
      const float* d = dout + static_cast<std::size_t>(n) * C;
      const float m = mean[n], r = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dweight[c] += (x[c] - m) * r * d[c];
        dbias[c] += d[c];
      }
    }
  }
}

}  // namespace pipelane::cpu
