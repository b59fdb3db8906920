// Naive double-precision reference implementations of the runtime op set, written for clarity, not
// speed, straight from the definitions (no shared code with runtime/cpu/). The op tests compare the
// fp32 ops against these, and obtain gradient truth by central finite differences of them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace pipelane::ref {

using Vec = std::vector<double>;

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
Vec embedding(const std::vector<std::int32_t>& tokens, const Vec& wte, const Vec& wpe, int B, int T,
              int C);

// Layernorm over the last dimension, biased variance, eps 1e-5. mean/rstd (if non-null) get [N].
Vec layernorm(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C, Vec* mean = nullptr,
              Vec* rstd = nullptr);

// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]; empty bias means none.
Vec matmul(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C, int OC);

// Causal multi-head attention on qkv[B,T,3C] = [q | k | v], heads contiguous (head h owns channels
// h*hs .. h*hs+hs-1 of each part), scores scaled by 1/sqrt(hs). att (if non-null) gets the softmax
// probabilities [B,NH,T,T], zero above the diagonal. Returns out[B,T,C].
Vec attention(const Vec& qkv, int B, int T, int C, int NH, Vec* att = nullptr);

// GeLU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Vec gelu(const Vec& x);

// logits[N,Vp] = x[N,C] @ wte[Vp,C]^T
Vec lm_head_logits(const Vec& x, const Vec& wte, int N, int C, int Vp);

// Softmax cross-entropy of x @ wte^T over the first V of the Vp vocabulary rows (padding rows
// V..Vp-1 are not part of the softmax). Returns losses[N] in nats.
Vec cross_entropy(const Vec& x, const Vec& wte, const std::vector<std::int32_t>& targets, int N,
                  int C, int V, int Vp);
// Analytic gradients of grad_scale * sum(cross_entropy(...)): dx[N,C] and dwte[Vp,C] (padding rows
// zero). Used where finite differences would be too slow (large vocabularies); validated against
// finite differences in the small case.
// losses (if non-null) also gets the forward losses.
void cross_entropy_backward(Vec& dx, Vec& dwte, const Vec& x, const Vec& wte,
                            const std::vector<std::int32_t>& targets, int N, int C, int V, int Vp,
                            double grad_scale, Vec* losses = nullptr);

// One step of torch.optim.AdamW (single-tensor path, amsgrad=False, maximize=False) on a tensor
// whose gradient is first multiplied by grad_scale. t is the 1-based step count.
struct AdamW {
  double lr, beta1, beta2, eps, weight_decay;
};
void adamw_step(Vec& param, const Vec& grad, Vec& m, Vec& v, const AdamW& h, int t,
                double grad_scale);

// ---- helpers for the tests ----

// Gradient of L(x) = sum_i R[i] * f(x)[i] with respect to x by central differences
// (L(x + eps e_j) - L(x - eps e_j)) / (2 eps), in double.
Vec fd_gradient(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& R,
                double eps = 1e-6);

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float scale = 1.0f);
Vec to_double(const std::vector<float>& v);
// Normwise relative error: max_i |got[i] - want[i]| / max_i |want[i]|.
double rel_error(const std::vector<float>& got, const Vec& want);
double rel_error(const float* got, const double* want, std::size_t n);

// Sets the OpenMP and OpenBLAS thread counts for a scope (both to n, as make_cpu_device(n) does,
// or separately), restoring the previous ones after.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : ScopedThreads(n, n) {}
  ScopedThreads(int omp_threads, int blas_threads);
  ~ScopedThreads();
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int prev_omp_, prev_blas_;
};

}  // namespace pipelane::ref
