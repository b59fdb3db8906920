#include <cmath>
#include <type_traits>
#include <vector>

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

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, ActivationIn inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C);
  layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C);
}

// The two halves of layernorm_backward (zero-bubble schedules run them at different times):
// layernorm_backward is exactly the one followed by the other.
// In: float, or std::uint16_t for a bf16 input (a row widened into fp32 before the fp32 loops).
template <typename In>
void layernorm_backward_input_t(float* dinp, const float* dout, const In* inp, const float* weight, const float* mean,
                                const float* rstd, int N, int C) {
#pragma omp parallel
  {
    std::vector<float> row(std::is_same_v<In, float> ? 0 : C);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* x = fp32_row(inp + static_cast<std::size_t>(n) * C, row.data(), C);
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
}

void layernorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight, const float* mean,
                              const float* rstd, int N, int C) {
  if (inp.is_bf16()) layernorm_backward_input_t(dinp, dout, inp.bf16, weight, mean, rstd, N, C);
  else layernorm_backward_input_t(dinp, dout, inp.f32, weight, mean, rstd, N, C);
}

template <typename In>
void layernorm_backward_params_t(float* dweight, float* dbias, const float* dout, const In* inp, const float* mean,
                                 const float* rstd, int N, int C) {
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = c0 + kSlice < C ? c0 + kSlice : C;
    float part[kSlice];
    for (int n = 0; n < N; ++n) {
      const float* x = fp32_row(inp + static_cast<std::size_t>(n) * C + c0, part, c1 - c0);  // from c0
      const float* d = dout + static_cast<std::size_t>(n) * C;
      const float m = mean[n], r = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dweight[c] += (x[c - c0] - m) * r * d[c];
        dbias[c] += d[c];
      }
    }
  }
}

void layernorm_backward_params(float* dweight, float* dbias, const float* dout, ActivationIn inp, const float* mean,
                               const float* rstd, int N, int C) {
  if (inp.is_bf16()) layernorm_backward_params_t(dweight, dbias, dout, inp.bf16, mean, rstd, N, C);
  else layernorm_backward_params_t(dweight, dbias, dout, inp.f32, mean, rstd, N, C);
}

}  // namespace pipelane::cpu
