// Causal attention with one (batch, head) pair per OpenMP task. Each pair touches only its own
// head's columns of out/dqkv and its own att block, so there are no races and no reductions across
// threads. Loops are written for the compiler's vectoriser (head sizes are 16..128).
// In bf16 compute mode the same loops run on bf16-rounded q, k, v and dout, and the products that
// a GPU runs as GEMMs read the probabilities (att @ v, att^T @ dy) and dpreatt rounded too
// (gemm_operand<true>); softmax and its backward stay fp32. gemm_operand<false> is the identity:
// the fp32 instances are the fp32 ops as they were. The saved probabilities may be a bf16 buffer
// (P = std::uint16_t, probability_rows.h): each row is computed in fp32 and rounded into it; so may
// the output (O), each head's row likewise.
#include <cmath>
#include <vector>

#include "runtime/cpu/attention_operands.h"
#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/fast_math.h"
#include "runtime/cpu/probability_rows.h"
#include "runtime/cpu/vector_loops.h"
#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {


template <bool kBf16, typename O, typename P>
void attention_forward_t(O* out, P* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* base = qkv + static_cast<std::size_t>(b) * T * C3;
      P* A = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
      ComputedRow<P> computed(T);
      ComputedRow<O> output(hs);
      for (int i = 0; i < T; ++i) {
        const float* q = base + static_cast<std::size_t>(i) * C3 + h * hs;
        float* row = computed.at(A + static_cast<std::size_t>(i) * T);
        float maxv = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const float* k = base + static_cast<std::size_t>(j) * C3 + C + h * hs;
          row[j] = dot(q, k, hs) * scale;
          maxv = row[j] > maxv ? row[j] : maxv;
        }
        float sum = 0.f;
        for (int j = 0; j <= i; ++j) {
          row[j] = exp_approx(row[j] - maxv);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j <= i; ++j) row[j] *= inv;
        for (int j = i + 1; j < T; ++j) row[j] = 0.f;
        O* out_row = out + (static_cast<std::size_t>(b) * T + i) * C + h * hs;
        float* o = output.at(out_row);
        for (int d = 0; d < hs; ++d) o[d] = 0.f;
        for (int j = 0; j <= i; ++j) {
          const float* v = base + static_cast<std::size_t>(j) * C3 + 2 * C + h * hs;
          axpy(o, gemm_operand<kBf16>(row[j]), v, hs);
        }
        output.store(out_row, hs);
        computed.store(A + static_cast<std::size_t>(i) * T, T);
      }
    }
  }
}

template <bool kBf16, typename P>
void attention_backward_t(float* dqkv, const float* dout, const float* qkv, const P* att, int B,
                          int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel
  {
    // One row of dS per thread (and for a bf16 buffer the widened row of P after it).
    std::vector<float> dscore(static_cast<std::size_t>(std::is_same_v<P, float> ? T : 2 * T));
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const float* base = qkv + static_cast<std::size_t>(b) * T * C3;
        float* dbase = dqkv + static_cast<std::size_t>(b) * T * C3;
        const P* A = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
        for (int t = 0; t < T; ++t)
          for (int part = 0; part < 3; ++part) {
            float* d = dbase + static_cast<std::size_t>(t) * C3 + part * C + h * hs;
            for (int e = 0; e < hs; ++e) d[e] = 0.f;
          }
        for (int i = 0; i < T; ++i) {
          const float* row = fp32_row(A + static_cast<std::size_t>(i) * T, dscore.data() + T, i + 1);
          const float* go = dout + (static_cast<std::size_t>(b) * T + i) * C + h * hs;
          const float* q = base + static_cast<std::size_t>(i) * C3 + h * hs;
          float* dq = dbase + static_cast<std::size_t>(i) * C3 + h * hs;
          float weighted = 0.f;  // sum_j P_ij dP_ij
          for (int j = 0; j <= i; ++j) {
            const float* v = base + static_cast<std::size_t>(j) * C3 + 2 * C + h * hs;
            float* dv = dbase + static_cast<std::size_t>(j) * C3 + 2 * C + h * hs;
            const float dp = dot(go, v, hs);
            dscore[j] = dp;
            weighted += row[j] * dp;
            axpy(dv, gemm_operand<kBf16>(row[j]), go, hs);
          }
          for (int j = 0; j <= i; ++j) {
            const float ds = gemm_operand<kBf16>(row[j] * (dscore[j] - weighted) * scale);
            const float* k = base + static_cast<std::size_t>(j) * C3 + C + h * hs;
            float* dk = dbase + static_cast<std::size_t>(j) * C3 + C + h * hs;
            axpy(dq, ds, k, hs);
            axpy(dk, ds, q, hs);
          }
        }
      }
    }
  }
}

namespace {
// attention_forward_t on the element types of the output and the probabilities (fp32 or bf16 each).
template <bool kBf16>
void attention_forward_any(ActivationOut out, ActivationOut att, const float* qkv, int B, int T, int C, int NH) {
  const auto with_output = [&](auto* o) {
    if (att.is_bf16()) attention_forward_t<kBf16>(o, att.bf16, qkv, B, T, C, NH);
    else attention_forward_t<kBf16>(o, att.f32, qkv, B, T, C, NH);
  };
  if (out.is_bf16()) with_output(out.bf16);
  else with_output(out.f32);
}
}  // namespace

void attention_forward(ActivationOut out, ActivationOut att, ActivationIn qkv, int B, int T, int C, int NH) {
  std::vector<float> copy;
  const float* x = attention_operand(qkv, static_cast<std::size_t>(B) * T * 3 * C, false, copy);
  attention_forward_any<false>(out, att, x, B, T, C, NH);
}
void attention_backward(float* dqkv, const float* dout, ActivationIn qkv, ActivationIn att, int B, int T, int C,
                        int NH) {
  std::vector<float> copy;
  const float* x = attention_operand(qkv, static_cast<std::size_t>(B) * T * 3 * C, false, copy);
  if (att.is_bf16()) attention_backward_t<false>(dqkv, dout, x, att.bf16, B, T, C, NH);
  else attention_backward_t<false>(dqkv, dout, x, att.f32, B, T, C, NH);
}

namespace bf16 {
void attention_forward(ActivationOut out, ActivationOut att, ActivationIn qkv, int B, int T, int C, int NH) {
  std::vector<float> q;
  attention_operand(qkv, static_cast<std::size_t>(B) * T * 3 * C, true, q);
  attention_forward_any<true>(out, att, q.data(), B, T, C, NH);
}
void attention_backward(float* dqkv, const float* dout, ActivationIn qkv, ActivationIn att, int B, int T, int C,
                        int NH) {
  const std::size_t n = static_cast<std::size_t>(B) * T * C;
  std::vector<float> q, d(n);
  attention_operand(qkv, 3 * n, true, q);
  round_to_bf16(d.data(), dout, n);
  if (att.is_bf16()) attention_backward_t<true>(dqkv, d.data(), q.data(), att.bf16, B, T, C, NH);
  else attention_backward_t<true>(dqkv, d.data(), q.data(), att.f32, B, T, C, NH);
}
}  // namespace bf16

}  // namespace pipelane::cpu
