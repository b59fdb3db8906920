#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/fast_math.h"
#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr std::size_t kBlock = 1 << 16;            // fixed reduction block: thread-count independent
}  // namespace

// Out: float, or std::uint16_t for a bf16 output (each value rounded as it is written).
template <typename Out>
void gelu_forward_t(Out* out, const float* inp, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = stored_as<Out>(0.5f * x * (1.0f + tanh_approx(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

void gelu_forward(ActivationOut out, const float* inp, std::size_t n) {
  if (out.is_bf16()) gelu_forward_t(out.bf16, inp, n);
  else gelu_forward_t(out.f32, inp, n);
}

// In: float, or std::uint16_t for a bf16 input (each value widened as it is read).
template <typename In>
void gelu_backward_t(float* dinp, const In* inp, const float* dout, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float x = widened(inp[i]);
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanh_approx(u);
    const float sech2 = 1.0f - th * th;
    const float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local * dout[i];
  }
}

void gelu_backward(float* dinp, ActivationIn inp, const float* dout, std::size_t n) {
  if (inp.is_bf16()) gelu_backward_t(dinp, inp.bf16, dout, n);
  else gelu_backward_t(dinp, inp.f32, dout, n);
}

void add_forward(float* out, const float* a, const float* b, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
}

void add_bias(float* out, const float* bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* o = out + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] += bias[c];
  }
}

void scale_inplace(float* x, float s, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) x[i] *= s;
}

void cast_to_bf16(std::uint16_t* out, const float* in, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    const float r = round_to_bf16(in[i]);
    std::memcpy(&u, &r, sizeof u);
    out[i] = static_cast<std::uint16_t>(u >> 16);
  }
}

void cast_from_bf16(float* out, const std::uint16_t* in, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &u, sizeof u);
  }
}

void round_to_bf16_inplace(float* x, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

double sum_squares(const float* x, std::size_t n) {
  const std::size_t blocks = (n + kBlock - 1) / kBlock;
  double total = 0.0;
  // Small inputs stay serial; big ones get one partial per block, summed in block order.
  if (blocks <= 1) {
    for (std::size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
    return total;
  }
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static)
  for (std::size_t bi = 0; bi < blocks; ++bi) {
    const std::size_t i0 = bi * kBlock, i1 = i0 + kBlock < n ? i0 + kBlock : n;
    double s = 0.0;
    for (std::size_t i = i0; i < i1; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[bi] = s;
  }
  for (std::size_t bi = 0; bi < blocks; ++bi) total += partial[bi];
  return total;
}

}  // namespace pipelane::cpu
