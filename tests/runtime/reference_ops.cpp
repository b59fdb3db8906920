#include "tests/runtime/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <omp.h>

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);

namespace pipelane::ref {

Vec embedding(const std::vector<std::int32_t>& tokens, const Vec& wte, const Vec& wpe, int B, int T,
              int C) {
  Vec out(static_cast<std::size_t>(B) * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const std::size_t n = static_cast<std::size_t>(b) * T + t;
      const std::size_t tok = static_cast<std::size_t>(tokens[n]);
      for (int c = 0; c < C; ++c) out[n * C + c] = wte[tok * C + c] + wpe[static_cast<std::size_t>(t) * C + c];
    }
  return out;
}

Vec layernorm(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C, Vec* mean,
              Vec* rstd) {
  Vec out(inp.size());
  if (mean) mean->assign(N, 0.0);
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; ++n) {
    const double* x = inp.data() + static_cast<std::size_t>(n) * C;
    double m = 0.0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const double r = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c)
      out[static_cast<std::size_t>(n) * C + c] = (x[c] - m) * r * weight[c] + bias[c];
    if (mean) (*mean)[n] = m;
    if (rstd) (*rstd)[n] = r;
  }
  return out;
}

Vec matmul(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C, int OC) {
  Vec out(static_cast<std::size_t>(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int c = 0; c < C; ++c)
        s += inp[static_cast<std::size_t>(n) * C + c] * weight[static_cast<std::size_t>(o) * C + c];
      out[static_cast<std::size_t>(n) * OC + o] = s;
    }
  return out;
}

Vec attention(const Vec& qkv, int B, int T, int C, int NH, Vec* att) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Vec out(static_cast<std::size_t>(B) * T * C, 0.0);
  if (att) att->assign(static_cast<std::size_t>(B) * NH * T * T, 0.0);
  auto at = [&](int b, int t, int part, int h, int d) {
    return qkv[(static_cast<std::size_t>(b) * T + t) * 3 * C + static_cast<std::size_t>(part) * C +
               static_cast<std::size_t>(h) * hs + d];
  };
  Vec p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        double maxs = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int d = 0; d < hs; ++d) s += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          p[j] = s * scale;
          maxs = std::max(maxs, p[j]);
        }
        double z = 0.0;
        for (int j = 0; j <= i; ++j) z += std::exp(p[j] - maxs);
        for (int j = 0; j <= i; ++j) p[j] = std::exp(p[j] - maxs) / z;
        for (int d = 0; d < hs; ++d) {
          double o = 0.0;
          for (int j = 0; j <= i; ++j) o += p[j] * at(b, j, 2, h, d);
          out[(static_cast<std::size_t>(b) * T + i) * C + static_cast<std::size_t>(h) * hs + d] = o;
        }
        if (att)
          for (int j = 0; j <= i; ++j)
            (*att)[((static_cast<std::size_t>(b) * NH + h) * T + i) * T + j] = p[j];
      }
  return out;
}

Vec gelu(const Vec& x) {
  const double k = std::sqrt(2.0 / M_PI);
  Vec out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    out[i] = 0.5 * x[i] * (1.0 + std::tanh(k * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return out;
}

Vec lm_head_logits(const Vec& x, const Vec& wte, int N, int C, int Vp) {
  return matmul(x, wte, {}, N, C, Vp);
}

namespace {
// Probabilities over the first V columns for row n (padding excluded) and the row's loss.
double softmax_row(const Vec& x, const Vec& wte, int n, int C, int V, int target, Vec& prob) {
  prob.assign(V, 0.0);
  double maxz = -std::numeric_limits<double>::infinity();
  for (int v = 0; v < V; ++v) {
    double z = 0.0;
    for (int c = 0; c < C; ++c)
      z += x[static_cast<std::size_t>(n) * C + c] * wte[static_cast<std::size_t>(v) * C + c];
    prob[v] = z;
    maxz = std::max(maxz, z);
  }
  const double zt = prob[target];
  double sum = 0.0;
  for (int v = 0; v < V; ++v) {
    prob[v] = std::exp(prob[v] - maxz);
    sum += prob[v];
  }
  for (int v = 0; v < V; ++v) prob[v] /= sum;
  return std::log(sum) + maxz - zt;
}
}  // namespace

Vec cross_entropy(const Vec& x, const Vec& wte, const std::vector<std::int32_t>& targets, int N,
                  int C, int V, int Vp) {
  if (V > Vp) throw std::invalid_argument("ref::cross_entropy: V > Vp");
  Vec losses(N), prob;
  for (int n = 0; n < N; ++n) losses[n] = softmax_row(x, wte, n, C, V, targets[n], prob);
  return losses;
}

void cross_entropy_backward(Vec& dx, Vec& dwte, const Vec& x, const Vec& wte,
                            const std::vector<std::int32_t>& targets, int N, int C, int V, int Vp,
                            double grad_scale, Vec* losses) {
  dx.assign(static_cast<std::size_t>(N) * C, 0.0);
  dwte.assign(static_cast<std::size_t>(Vp) * C, 0.0);
  if (losses) losses->assign(N, 0.0);
  Vec prob;
  for (int n = 0; n < N; ++n) {
    const double loss = softmax_row(x, wte, n, C, V, targets[n], prob);
    if (losses) (*losses)[n] = loss;
    for (int v = 0; v < V; ++v) {
      const double dz = grad_scale * (prob[v] - (v == targets[n] ? 1.0 : 0.0));
      for (int c = 0; c < C; ++c) {
        dx[static_cast<std::size_t>(n) * C + c] += dz * wte[static_cast<std::size_t>(v) * C + c];
        dwte[static_cast<std::size_t>(v) * C + c] += dz * x[static_cast<std::size_t>(n) * C + c];
      }
    }
  }
}

void adamw_step(Vec& param, const Vec& grad, Vec& m, Vec& v, const AdamW& h, int t,
                double grad_scale) {
  // torch.optim.adamw._single_tensor_adamw, in the same order.
  const double bias_correction1 = 1.0 - std::pow(h.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, t);
  const double step_size = h.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double g = grad[i] * grad_scale;
    param[i] *= 1.0 - h.lr * h.weight_decay;
    m[i] += (g - m[i]) * (1.0 - h.beta1);  // exp_avg.lerp_(grad, 1 - beta1)
    v[i] = v[i] * h.beta2 + (1.0 - h.beta2) * g * g;
    const double denom = std::sqrt(v[i]) / bias_correction2_sqrt + h.eps;
    param[i] += -step_size * (m[i] / denom);
  }
}

Vec fd_gradient(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& R, double eps) {
  Vec g(x.size());
  Vec xp = x;
  auto loss = [&](const Vec& in) {
    const Vec out = f(in);
    if (out.size() != R.size()) throw std::invalid_argument("fd_gradient: R has the wrong size");
    double s = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) s += R[i] * out[i];
    return s;
  };
  for (std::size_t j = 0; j < x.size(); ++j) {
    xp[j] = x[j] + eps;
    const double lp = loss(xp);
    xp[j] = x[j] - eps;
    const double lm = loss(xp);
    xp[j] = x[j];
    g[j] = (lp - lm) / (2.0 * eps);
  }
  return g;
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

double rel_error(const float* got, const double* want, std::size_t n) {
  double maxdiff = 0.0, maxref = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();  // NaN or Inf: fail
    maxdiff = std::max(maxdiff, d);
    maxref = std::max(maxref, std::abs(want[i]));
  }
  return maxref > 0.0 ? maxdiff / maxref : maxdiff;
}

double rel_error(const std::vector<float>& got, const Vec& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  return rel_error(got.data(), want.data(), got.size());
}

ScopedThreads::ScopedThreads(int omp_threads, int blas_threads)
    : prev_omp_(omp_get_max_threads()), prev_blas_(openblas_get_num_threads()) {
  omp_set_num_threads(omp_threads);
  openblas_set_num_threads(blas_threads);
}

ScopedThreads::~ScopedThreads() {
  omp_set_num_threads(prev_omp_);
  openblas_set_num_threads(prev_blas_);
}

}  // namespace pipelane::ref
