// A small interpreter of cuBLASLt's column-major GEMM semantics (runtime/cuda/plans/gemm_plan.h),
// in double, for checking on the CPU that a GemmCall computes what the row-major op means; the
// emulated CUDA backend's GEMM engine (interpreted_gemm.h) runs its GEMMs with it.
// Storage: fp32, or bf16 as its 16 bits (the layout of __nv_bfloat16), rounded to nearest even.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "runtime/cuda/plans/gemm_plan.h"

namespace pipelane::cuda_emu {

inline float bf16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline double load(const void* p, cuda::DataType t, std::int64_t i) {
  if (t == cuda::DataType::BF16) return bf16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
inline void store(void* p, cuda::DataType t, std::int64_t i, double v) {
  if (t == cuda::DataType::BF16)
    static_cast<std::uint16_t*>(p)[i] = float_to_bf16_bits(static_cast<float>(v));
  else
    static_cast<float*>(p)[i] = static_cast<float>(v);
}

inline double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double gelu_derivative(double x) {
  const double k = std::sqrt(2.0 / M_PI), th = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// D = alpha op(A) op(B) + beta C, then the epilogue, for every batch.
inline void run_gemm(const cuda::GemmCall& g) {
  using cuda::Epilogue;
  using cuda::Trans;
  if (g.epilogue == Epilogue::BGradB && g.batch != 1)
    throw std::invalid_argument("run_gemm: BGRADB on a batched GEMM");
  const cuda::DataType dt = g.c.type;
  for (int bt = 0; bt < g.batch; ++bt) {
    const auto A = [&](int i, int p) {
      const std::int64_t off = bt * g.a.batch_stride;
      return load(g.a.ptr, g.a.type,
                  off + (g.transa == Trans::N ? i + p * g.a.ld : p + i * g.a.ld));
    };
    const auto B = [&](int p, int j) {
      const std::int64_t off = bt * g.b.batch_stride;
      return load(g.b.ptr, g.b.type,
                  off + (g.transb == Trans::N ? p + j * g.b.ld : j + p * g.b.ld));
    };
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        double acc = 0.0;
        for (int p = 0; p < g.k; ++p) acc += A(i, p) * B(p, j);
        const std::int64_t at = bt * g.c.batch_stride + i + j * g.c.ld;
        double v = g.alpha * acc + (g.beta != 0.0f ? g.beta * load(g.c.ptr, dt, at) : 0.0);
        const std::int64_t aux_at = i + static_cast<std::int64_t>(j) * g.aux_ld;
        switch (g.epilogue) {
          case Epilogue::None:
          case Epilogue::BGradB: break;
          case Epilogue::Bias: v += load(g.bias, g.bias_type, i); break;
          case Epilogue::GeluAuxBias: v += load(g.bias, g.bias_type, i); [[fallthrough]];
          case Epilogue::GeluAux:
            store(g.aux, dt, aux_at, v);
            v = gelu(v);
            break;
          case Epilogue::DGelu: v *= gelu_derivative(load(g.aux, dt, aux_at)); break;
        }
        store(g.d, dt, at, v);
      }
    if (g.epilogue == Epilogue::BGradB)
      for (int j = 0; j < g.n; ++j) {
        double s = 0.0;
        for (int p = 0; p < g.k; ++p) s += B(p, j);
        store(g.bias, g.bias_type, j, s);
      }
  }
}

}  // namespace pipelane::cuda_emu
