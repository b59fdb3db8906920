// Double-precision references for what the CUDA kernels compute and tests/runtime/reference_ops.h
// does not cover (backward passes written out analytically, the attention softmax on its own,
// column sums). Straight from the definitions, for clarity.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace pipelane::cuda_test::ref2 {

using Vec = std::vector<double>;

// Layernorm backward given the forward's mean and rstd: returns dinp (the increment, not
// accumulated) and adds to dweight, dbias.
inline Vec layernorm_backward(const Vec& dout, const Vec& inp, const Vec& weight, const Vec& mean,
                              const Vec& rstd, int N, int C, Vec& dweight, Vec& dbias) {
  Vec dinp(inp.size());
  for (int n = 0; n < N; ++n) {
    const std::size_t row = static_cast<std::size_t>(n) * C;
    double a = 0.0, b = 0.0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[row + c] - mean[n]) * rstd[n];
      a += weight[c] * dout[row + c];
      b += weight[c] * dout[row + c] * xhat;
      dweight[c] += xhat * dout[row + c];
      dbias[c] += dout[row + c];
    }
    a /= C;
    b /= C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[row + c] - mean[n]) * rstd[n];
      dinp[row + c] = (weight[c] * dout[row + c] - a - xhat * b) * rstd[n];
    }
  }
  return dinp;
}

// d/dx of the tanh-form GeLU, times dout.
inline Vec gelu_backward(const Vec& x, const Vec& dout) {
  const double k = std::sqrt(2.0 / M_PI);
  Vec d(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = k * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
    const double th = std::tanh(u);
    const double du = k * (1.0 + 3.0 * 0.044715 * x[i] * x[i]);
    d[i] = (0.5 * (1.0 + th) + 0.5 * x[i] * (1.0 - th * th) * du) * dout[i];
  }
  return d;
}

// Causal softmax of scale * preatt over rows of length T (query position = row % T).
inline Vec causal_softmax(const Vec& preatt, double scale, int rows, int T) {
  Vec att(preatt.size(), 0.0);
  for (int r = 0; r < rows; ++r) {
    const int i = r % T;
    const double* x = preatt.data() + static_cast<std::size_t>(r) * T;
    double m = -std::numeric_limits<double>::infinity(), s = 0.0;
    for (int j = 0; j <= i; ++j) m = std::max(m, scale * x[j]);
    for (int j = 0; j <= i; ++j) s += std::exp(scale * x[j] - m);
    for (int j = 0; j <= i; ++j)
      att[static_cast<std::size_t>(r) * T + j] = std::exp(scale * x[j] - m) / s;
  }
  return att;
}

inline Vec causal_softmax_backward(const Vec& datt, const Vec& att, double scale, int rows, int T) {
  Vec d(att.size(), 0.0);
  for (int r = 0; r < rows; ++r) {
    const int i = r % T;
    const std::size_t base = static_cast<std::size_t>(r) * T;
    double w = 0.0;
    for (int j = 0; j <= i; ++j) w += att[base + j] * datt[base + j];
    for (int j = 0; j <= i; ++j) d[base + j] = scale * att[base + j] * (datt[base + j] - w);
  }
  return d;
}

// dwte[tokens[n] - v0] += dout[n] for tokens in [v0, v0 + vcount); dwpe[n % T] += dout[n].
inline void embedding_backward(Vec& dwte, Vec& dwpe, const Vec& dout,
                               const std::vector<std::int32_t>& tokens, int B, int T, int C, int v0,
                               int vcount) {
  for (int n = 0; n < B * T; ++n) {
    const int local = tokens[n] - v0;
    for (int c = 0; c < C; ++c) {
      const double d = dout[static_cast<std::size_t>(n) * C + c];
      dwpe[static_cast<std::size_t>(n % T) * C + c] += d;
      if (local >= 0 && local < vcount) dwte[static_cast<std::size_t>(local) * C + c] += d;
    }
  }
}

// acc[c] += sum_n x[n, c]
inline void add_column_sums(Vec& acc, const Vec& x, int N, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) acc[c] += x[static_cast<std::size_t>(n) * C + c];
}

}  // namespace pipelane::cuda_test::ref2
