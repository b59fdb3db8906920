#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * T; ++n) {
    const int t = n % T;
    const float* w = wte + static_cast<std::size_t>(tokens[n]) * C;
    const float* p = wpe + static_cast<std::size_t>(t) * C;
    float* o = out + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int B, int T, int C) {
  // Parallel over channels: each thread owns a column slice of dwte/dwpe, so repeated tokens never
  // race and the summation order (rows in order) is the same for any thread count.
  constexpr int kSlice = 16;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = c0 + kSlice < C ? c0 + kSlice : C;
    for (int n = 0; n < B * T; ++n) {
      const int t = n % T;
      const float* d = dout + static_cast<std::size_t>(n) * C;
      float* w = dwte + static_cast<std::size_t>(tokens[n]) * C;
      float* p = dwpe + static_cast<std::size_t>(t) * C;
      for (int c = c0; c < c1; ++c) {
        w[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

}  // namespace pipelane::cpu

namespace pipelane::cpu {

// Moved from model/gpt_model.cpp unchanged (the vocab-parallel embedding).
void embedding_lookup_local(float* out, const std::int32_t* tokens, const float* wte, int N, int C,
                            int v0, int vcount) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* o = out + static_cast<std::size_t>(n) * C;
    const int local = tokens[n] - v0;
    if (local >= 0 && local < vcount) {
      const float* w = wte + static_cast<std::size_t>(local) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = w[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = 0.f;
    }
  }
}

void add_positions(float* out, const float* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * T; ++n) {
    float* o = out + static_cast<std::size_t>(n) * C;
    const float* p = wpe + static_cast<std::size_t>(n % T) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] += p[c];
  }
}

// Same channel-slice partition and row order as embedding_backward, so the sums are the
// unsplit ones.
void embedding_backward_local(float* dwte, float* dwpe, const float* dout,
                              const std::int32_t* tokens, int B, int T, int C, int v0, int vcount) {
  constexpr int kSlice = 16;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = c0 + kSlice < C ? c0 + kSlice : C;
    for (int n = 0; n < B * T; ++n) {
      const float* d = dout + static_cast<std::size_t>(n) * C;
      float* p = dwpe + static_cast<std::size_t>(n % T) * C;
      for (int c = c0; c < c1; ++c) p[c] += d[c];
      const int local = tokens[n] - v0;
      if (local < 0 || local >= vcount) continue;
      float* w = dwte + static_cast<std::size_t>(local) * C;
      for (int c = c0; c < c1; ++c) w[c] += d[c];
    }
  }
}

}  // namespace pipelane::cpu

namespace pipelane::cpu {

// embedding_backward_local without the positions (a model with RoPE has no wpe): the same
// channel slices and row order.
void embedding_backward_tokens(float* dwte, const float* dout, const std::int32_t* tokens, int N, int C, int v0,
                               int vcount) {
  constexpr int kSlice = 16;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c0 = s * kSlice, c1 = c0 + kSlice < C ? c0 + kSlice : C;
    for (int n = 0; n < N; ++n) {
      const int local = tokens[n] - v0;
      if (local < 0 || local >= vcount) continue;
      const float* d = dout + static_cast<std::size_t>(n) * C;
      float* w = dwte + static_cast<std::size_t>(local) * C;
      for (int c = c0; c < c1; ++c) w[c] += d[c];
    }
  }
}

}  // namespace pipelane::cpu
