// RMSNorm (Llama): out = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps), as Hugging Face's
// LlamaRMSNorm computes it in fp32. One row per iteration; the weight gradient is summed over
// rows in row order inside thread-owned channel slices, so no result depends on the thread count.
#include <cmath>
#include <type_traits>
#include <vector>

#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

namespace {
constexpr int kSlice = 16;  // channels per thread-owned slice in the weight-gradient reduction
}  // namespace

// Out: float, or std::uint16_t for a bf16 output (each value rounded as it is written).
template <typename Out>
void rmsnorm_forward_t(Out* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / C + eps);
    Out* o = out + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = stored_as<Out>(weight[c] * (x[c] * r));
    rstd[n] = r;
  }
}

void rmsnorm_forward(ActivationOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  if (out.is_bf16()) rmsnorm_forward_t(out.bf16, rstd, inp, weight, N, C, eps);
  else rmsnorm_forward_t(out.f32, rstd, inp, weight, N, C, eps);
}

// dx = r * (w * dy) - x * r^3 * mean(w * dy * x): the gradient through the normalisation.
// In: float, or std::uint16_t for a bf16 input (a row widened into fp32 before the fp32 loops).
template <typename In>
void rmsnorm_backward_input_t(float* dinp, const float* dout, const In* inp, const float* weight, const float* rstd,
                              int N, int C) {
#pragma omp parallel
  {
    std::vector<float> row(std::is_same_v<In, float> ? 0 : C);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* x = fp32_row(inp + static_cast<std::size_t>(n) * C, row.data(), C);
      const float* d = dout + static_cast<std::size_t>(n) * C;
      const float r = rstd[n];
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) dot += weight[c] * d[c] * x[c];
      const float k = dot / C * r * r;
      float* di = dinp + static_cast<std::size_t>(n) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) di[c] += (weight[c] * d[c] - x[c] * k) * r;
    }
  }
}

void rmsnorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight, const float* rstd,
                            int N, int C) {
  if (inp.is_bf16()) rmsnorm_backward_input_t(dinp, dout, inp.bf16, weight, rstd, N, C);
  else rmsnorm_backward_input_t(dinp, dout, inp.f32, weight, rstd, N, C);
}

template <typename In>
void rmsnorm_backward_params_t(float* dweight, const float* dout, const In* inp, const float* rstd, int N, int C) {
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = c0 + kSlice < C ? c0 + kSlice : C;
    float part[kSlice];
    for (int n = 0; n < N; ++n) {
      const float* x = fp32_row(inp + static_cast<std::size_t>(n) * C + c0, part, c1 - c0);  // from c0
      const float* d = dout + static_cast<std::size_t>(n) * C;
      const float r = rstd[n];
      for (int c = c0; c < c1; ++c) dweight[c] += x[c - c0] * r * d[c];
    }
  }
}

void rmsnorm_backward_params(float* dweight, const float* dout, ActivationIn inp, const float* rstd, int N, int C) {
  if (inp.is_bf16()) rmsnorm_backward_params_t(dweight, dout, inp.bf16, rstd, N, C);
  else rmsnorm_backward_params_t(dweight, dout, inp.f32, rstd, N, C);
}

}  // namespace pipelane::cpu
