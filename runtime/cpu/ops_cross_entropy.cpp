// The tied LM head fused with softmax cross-entropy, a block of rows at a time, so at most one
// [rows, Vp] logits block exists however large B*T is (with V = 50304 a full B*T*V buffer would
// be hundreds of MB).
// The three GEMMs come from a policy (logits, then dx and dwte from dlogits): sgemm on fp32
// operands, or oneDNN's bf16 GEMMs (onednn_bf16_gemm.h). In emulated bf16 compute mode (the bf16::
// entry points) x and wte come in rounded to bf16 and each row of dlogits is rounded in place
// (kRoundDlogits) before the sgemms read it; the oneDNN entry points round all three where they
// convert them to bf16. The softmax and the losses are fp32 in every mode. The fp32 instances are
// the fp32 ops as they were: the same sgemm calls.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/fast_math.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/onednn_bf16_gemm.h"

namespace pipelane::cpu {

namespace {
constexpr std::size_t kLogitsBlockBytes = std::size_t{128} << 20;

// The head's GEMMs on fp32 (or bf16-rounded fp32) x[N,C] and a vocabulary block wte[W,C] (W = Vp,
// or vocab_count for the vocab-parallel head), for rows [r0, r0 + rows).
struct SgemmHead {
  const float* x;
  const float* wte;
  int C, W;
  // z[rows,W] = x[r0..] @ wte^T
  void logits(int r0, int rows, float* z) const {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, W, C, 1.0f, x + static_cast<std::size_t>(r0) * C, C,
                wte, C, 0.0f, z, W);
  }
  // dx[rows,C] = dz @ wte; dwte += dz^T @ x[r0..]
  void backward(int r0, int rows, const float* dz, float* dx, float* dwte) const {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, C, W, 1.0f, dz, W, wte, C, 0.0f, dx, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, W, C, rows, 1.0f, dz, W,
                x + static_cast<std::size_t>(r0) * C, C, 1.0f, dwte, C);
  }
};

// The same GEMMs on oneDNN: x and an fp32 wte converted to bf16 once per call (a bf16 wte read as
// it is), dz once per block.
class OnednnHead {
 public:
  OnednnHead(OnednnBf16Gemm& g, const float* x, GemmWeight wte, int N, int C, int W)
      : g_(g),
        x_(g.staged(0, x, static_cast<std::size_t>(N) * C)),
        wte_(onednn::weight_bits(g, 1, wte, static_cast<std::size_t>(W) * C)),
        C_(C),
        W_(W) {}
  void logits(int r0, int rows, float* z) const {
    g_.gemm(false, true, rows, W_, C_, x_ + static_cast<std::size_t>(r0) * C_, C_, wte_, C_, false, z, W_);
  }
  void backward(int r0, int rows, const float* dz, float* dx, float* dwte) const {
    const std::uint16_t* d = g_.staged(2, dz, static_cast<std::size_t>(rows) * W_);
    g_.gemm(false, false, rows, C_, W_, d, W_, wte_, C_, false, dx, C_);
    g_.gemm(true, false, W_, C_, rows, d, W_, x_ + static_cast<std::size_t>(r0) * C_, C_, true, dwte, C_);
  }

 private:
  OnednnBf16Gemm& g_;
  const std::uint16_t* x_;
  const std::uint16_t* wte_;
  int C_, W_;
};
}  // namespace

int lm_head_chunk_rows(int N, int Vp) {
  const std::size_t by_bytes = kLogitsBlockBytes / (static_cast<std::size_t>(Vp) * sizeof(float));
  const int rows = static_cast<int>(std::max<std::size_t>(16, by_bytes / 16 * 16));
  return std::min(N, rows);
}

template <bool kRoundDlogits, typename Gemms>
double lm_head_cross_entropy_t(float* losses, float* dx, float* dwte, const Gemms& gemms,
                               const std::int32_t* targets, int N, int C, int V, int Vp,
                               float grad_scale, float* scratch) {
  const int R = lm_head_chunk_rows(N, Vp);
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    gemms.logits(r0, rows, scratch);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
      float* z = scratch + static_cast<std::size_t>(r) * Vp;
      float maxv = -INFINITY;
      for (int v = 0; v < V; ++v) maxv = std::max(maxv, z[v]);
      const int target = targets[r0 + r];
      const float target_logit = z[target] - maxv;  // kept before exp: exp may underflow to 0
      // The denominator sums ~50k terms: in float that alone costs ~3e-5 relative.
      double sum = 0.0;
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < V; ++v) {
        z[v] = exp_approx(z[v] - maxv);
        sum += z[v];
      }
      losses[r0 + r] = static_cast<float>(std::log(sum)) - target_logit;
      if (dx) {
        const float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
        for (int v = 0; v < V; ++v) z[v] = z[v] * inv * grad_scale;
        z[target] -= grad_scale;
        for (int v = V; v < Vp; ++v) z[v] = 0.f;
        if constexpr (kRoundDlogits)
          for (int v = 0; v < V; ++v) z[v] = round_to_bf16(z[v]);
      }
    }
    if (dx) gemms.backward(r0, rows, scratch, dx + static_cast<std::size_t>(r0) * C, dwte);
  }
  double total = 0.0;
  for (int n = 0; n < N; ++n) total += losses[n];
  return total;
}

std::size_t lm_head_vocab_parallel_scratch_floats(int N, int vocab_count) {
  const std::size_t R = static_cast<std::size_t>(lm_head_chunk_rows(N, vocab_count));
  return R * static_cast<std::size_t>(vocab_count) + 3 * R;
}

template <bool kRoundDlogits, typename Gemms>
double lm_head_cross_entropy_vocab_parallel_t(float* losses, float* dx, float* dwte, const Gemms& gemms,
                                              const std::int32_t* targets, int N, int C, int V,
                                              int vocab_begin, int vocab_count, float grad_scale,
                                              float* scratch, const GroupReduce& reduce) {
  const int Vl = vocab_count;
  // Columns of this block that are real tokens: [0, valid).
  const int valid = std::max(0, std::min(Vl, V - vocab_begin));
  const int R = lm_head_chunk_rows(N, Vl);
  float* rowmax = scratch + static_cast<std::size_t>(R) * Vl;  // [R]
  float* rowsum = rowmax + R;                                  // [rows], then target logits [rows]
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    // Right after this chunk's row sums, so that one all-reduce of 2 * rows floats covers both
    // also when the last chunk is shorter than R.
    float* rowtgt = rowsum + rows;
    gemms.logits(r0, rows, scratch);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
      const float* z = scratch + static_cast<std::size_t>(r) * Vl;
      float maxv = -INFINITY;
      for (int v = 0; v < valid; ++v) maxv = std::max(maxv, z[v]);
      rowmax[r] = maxv;
    }
    reduce.max(rowmax, static_cast<std::size_t>(rows));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
      float* z = scratch + static_cast<std::size_t>(r) * Vl;
      const float maxv = rowmax[r];
      const int local_target = targets[r0 + r] - vocab_begin;
      // The target logit relative to the max, from the one rank that holds it (0 elsewhere, so
      // the sum over ranks is exact).
      rowtgt[r] = local_target >= 0 && local_target < valid ? z[local_target] - maxv : 0.f;
      double sum = 0.0;
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < valid; ++v) {
        z[v] = exp_approx(z[v] - maxv);
        sum += z[v];
      }
      rowsum[r] = static_cast<float>(sum);
    }
    // rowsum and rowtgt are adjacent: one collective for both.
    reduce.sum(rowsum, 2 * static_cast<std::size_t>(rows));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
      const double sum = rowsum[r];
      losses[r0 + r] = static_cast<float>(std::log(sum)) - rowtgt[r];
      if (dx) {
        float* z = scratch + static_cast<std::size_t>(r) * Vl;
        const float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
        for (int v = 0; v < valid; ++v) z[v] = z[v] * inv * grad_scale;
        const int local_target = targets[r0 + r] - vocab_begin;
        if (local_target >= 0 && local_target < valid) z[local_target] -= grad_scale;
        for (int v = valid; v < Vl; ++v) z[v] = 0.f;
        if constexpr (kRoundDlogits)
          for (int v = 0; v < valid; ++v) z[v] = round_to_bf16(z[v]);
      }
    }
    if (dx) {
      // The all-reduce of dx comes after the local dwte GEMM, which neither reads nor writes dx.
      float* dxc = dx + static_cast<std::size_t>(r0) * C;
      gemms.backward(r0, rows, scratch, dxc, dwte);
      reduce.sum(dxc, static_cast<std::size_t>(rows) * C);
    }
  }
  double total = 0.0;
  for (int n = 0; n < N; ++n) total += losses[n];
  return total;
}

double lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x,
                             const float* wte, const std::int32_t* targets, int N, int C, int V,
                             int Vp, float grad_scale, float* scratch) {
  return lm_head_cross_entropy_t<false>(losses, dx, dwte, SgemmHead{x, wte, C, Vp}, targets, N, C, V, Vp,
                                        grad_scale, scratch);
}

double lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte, const float* x,
                                            const float* wte, const std::int32_t* targets, int N,
                                            int C, int V, int vocab_begin, int vocab_count,
                                            float grad_scale, float* scratch,
                                            const GroupReduce& reduce) {
  return lm_head_cross_entropy_vocab_parallel_t<false>(losses, dx, dwte, SgemmHead{x, wte, C, vocab_count},
                                                       targets, N, C, V, vocab_begin, vocab_count,
                                                       grad_scale, scratch, reduce);
}

namespace bf16 {

namespace {
std::vector<float> rounded(const float* src, int rows, int cols) {
  std::vector<float> out(static_cast<std::size_t>(rows) * cols);
  round_to_bf16(out.data(), src, out.size());
  return out;
}
}  // namespace

double lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x,
                             GemmWeight wte, const std::int32_t* targets, int N, int C, int V,
                             int Vp, float grad_scale, float* scratch) {
  const std::vector<float> xr = rounded(x, N, C), w = gemm_weight_values(wte, static_cast<std::size_t>(Vp) * C);
  return lm_head_cross_entropy_t<true>(losses, dx, dwte, SgemmHead{xr.data(), w.data(), C, Vp}, targets, N, C,
                                       V, Vp, grad_scale, scratch);
}

double lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte, const float* x,
                                            GemmWeight wte, const std::int32_t* targets, int N,
                                            int C, int V, int vocab_begin, int vocab_count,
                                            float grad_scale, float* scratch,
                                            const GroupReduce& reduce) {
  const std::vector<float> xr = rounded(x, N, C),
                           w = gemm_weight_values(wte, static_cast<std::size_t>(vocab_count) * C);
  return lm_head_cross_entropy_vocab_parallel_t<true>(losses, dx, dwte,
                                                      SgemmHead{xr.data(), w.data(), C, vocab_count},
                                                      targets, N, C, V, vocab_begin, vocab_count,
                                                      grad_scale, scratch, reduce);
}

}  // namespace bf16

namespace onednn {

double lm_head_cross_entropy(OnednnBf16Gemm& g, float* losses, float* dx, float* dwte, const float* x,
                             GemmWeight wte, const std::int32_t* targets, int N, int C, int V, int Vp,
                             float grad_scale, float* scratch) {
  const std::lock_guard<std::mutex> lock(g.op_mutex());
  return lm_head_cross_entropy_t<false>(losses, dx, dwte, OnednnHead(g, x, wte, N, C, Vp), targets, N, C, V, Vp,
                                        grad_scale, scratch);
}

double lm_head_cross_entropy_vocab_parallel(OnednnBf16Gemm& g, float* losses, float* dx, float* dwte,
                                            const float* x, GemmWeight wte, const std::int32_t* targets, int N,
                                            int C, int V, int vocab_begin, int vocab_count, float grad_scale,
                                            float* scratch, const GroupReduce& reduce) {
  const std::lock_guard<std::mutex> lock(g.op_mutex());
  return lm_head_cross_entropy_vocab_parallel_t<false>(losses, dx, dwte,
                                                       OnednnHead(g, x, wte, N, C, vocab_count), targets, N, C,
                                                       V, vocab_begin, vocab_count, grad_scale, scratch, reduce);
}

}  // namespace onednn

}  // namespace pipelane::cpu
