#include "tests/runtime/reference_ops_llama.h"

#include <cmath>

namespace pipelane::ref {

Vec rmsnorm(const Vec& x, const Vec& weight, int N, int C, double eps, Vec* rstd) {
  Vec out(x.size());
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) out[n * C + c] = weight[c] * x[n * C + c] * r;
    if (rstd) (*rstd)[n] = r;
  }
  return out;
}

Vec rope(const Vec& x, const Vec& table, int B, int T, int pos0, int heads, int hs, int ld, double sign) {
  Vec out = x;
  const int half = hs / 2;
  for (int n = 0; n < B * T; ++n) {
    const int p = pos0 + n % T;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hs; ++i) {
        // rotate_half(x)[i] = -x[i + half] for i < half, x[i - half] after.
        const int pair = i < half ? i + half : i - half;
        const double rot = i < half ? -x[n * ld + h * hs + pair] : x[n * ld + h * hs + pair];
        const double c = table[p * hs + i % half], s = sign * table[p * hs + half + i % half];
        out[n * ld + h * hs + i] = x[n * ld + h * hs + i] * c + rot * s;
      }
  }
  return out;
}

Vec swiglu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
  return out;
}

Vec attention_gqa(const Vec& q, const Vec& k, const Vec& v, int B, int T, int NH, int KVH, int hs) {
  // repeat_kv: head h of k/v is kv head h / (NH / KVH); then the fused MHA reference.
  const int C = NH * hs, G = NH / KVH;
  Vec qkv(static_cast<std::size_t>(B) * T * 3 * C);
  for (int n = 0; n < B * T; ++n)
    for (int h = 0; h < NH; ++h)
      for (int e = 0; e < hs; ++e) {
        qkv[n * 3 * C + h * hs + e] = q[n * C + h * hs + e];
        qkv[n * 3 * C + C + h * hs + e] = k[n * KVH * hs + (h / G) * hs + e];
        qkv[n * 3 * C + 2 * C + h * hs + e] = v[n * KVH * hs + (h / G) * hs + e];
      }
  return attention(qkv, B, T, C, NH);
}

}  // namespace pipelane::ref
