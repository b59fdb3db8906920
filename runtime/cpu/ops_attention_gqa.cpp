// Causal grouped-query attention (Llama's GQA; MQA at kv_heads = 1, MHA at kv_heads = heads) on
// separate q [B,T,NH*hs] and k, v [B,T,KVH*hs]. Query head h reads kv head h / G (G = NH/KVH)
// where it lies: K and V are never repeated. Forward: one (batch, query head) per task, as
// ops_attention.cpp. Backward: one (batch, kv head) per task, its G query heads in order, so the
// dk/dv sums over the group run in one fixed order (no atomics, any thread count). bf16 compute
// rounds q, k, v, dout, the probabilities and dS where a GPU's GEMMs would read them, as the MHA
// kernels do (gemm_operand). The saved probabilities may be a bf16 buffer (P = std::uint16_t,
// probability_rows.h), and so may the output (O).
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/attention_operands.h"
#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/fast_math.h"
#include "runtime/cpu/probability_rows.h"
#include "runtime/cpu/vector_loops.h"

namespace pipelane::cpu {

namespace {

// Row pointers of one batch element: q rows are NH*hs apart, k and v rows KVH*hs.
struct Rows {
  std::size_t q, kv;
};

template <bool kBf16, typename O, typename P>
void forward_t(O* out, P* att, const float* q, const float* k, const float* v, int B, int T, int NH, int KVH,
               int hs) {
  const Rows ld{static_cast<std::size_t>(NH) * hs, static_cast<std::size_t>(KVH) * hs};
  const int G = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const std::size_t row0 = static_cast<std::size_t>(b) * T;
      const std::size_t kcol = static_cast<std::size_t>(h / G) * hs;
      P* A = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
      ComputedRow<P> computed(T);
      ComputedRow<O> output(hs);
      for (int i = 0; i < T; ++i) {
        const float* qi = q + (row0 + i) * ld.q + static_cast<std::size_t>(h) * hs;
        float* row = computed.at(A + static_cast<std::size_t>(i) * T);
        float maxv = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          row[j] = dot(qi, k + (row0 + j) * ld.kv + kcol, hs) * scale;
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
        O* out_row = out + (row0 + i) * ld.q + static_cast<std::size_t>(h) * hs;
        float* o = output.at(out_row);
        for (int d = 0; d < hs; ++d) o[d] = 0.f;
        for (int j = 0; j <= i; ++j) axpy(o, gemm_operand<kBf16>(row[j]), v + (row0 + j) * ld.kv + kcol, hs);
        output.store(out_row, hs);
        computed.store(A + static_cast<std::size_t>(i) * T, T);
      }
    }
  }
}

template <bool kBf16, typename P>
void backward_t(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                const float* v, const P* att, int B, int T, int NH, int KVH, int hs) {
  const Rows ld{static_cast<std::size_t>(NH) * hs, static_cast<std::size_t>(KVH) * hs};
  const int G = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel
  {
    // One row of dP per thread (and for a bf16 buffer the widened row of P after it).
    std::vector<float> dscore(static_cast<std::size_t>(std::is_same_v<P, float> ? T : 2 * T));
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int kh = 0; kh < KVH; ++kh) {
        const std::size_t row0 = static_cast<std::size_t>(b) * T;
        const std::size_t kcol = static_cast<std::size_t>(kh) * hs;
        for (int t = 0; t < T; ++t) {
          for (int e = 0; e < hs; ++e) dk[(row0 + t) * ld.kv + kcol + e] = 0.f;
          for (int e = 0; e < hs; ++e) dv[(row0 + t) * ld.kv + kcol + e] = 0.f;
          for (int g = 0; g < G; ++g)
            for (int e = 0; e < hs; ++e) dq[(row0 + t) * ld.q + static_cast<std::size_t>(kh * G + g) * hs + e] = 0.f;
        }
        for (int g = 0; g < G; ++g) {
          const int h = kh * G + g;
          const P* A = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
          for (int i = 0; i < T; ++i) {
            const float* row = fp32_row(A + static_cast<std::size_t>(i) * T, dscore.data() + T, i + 1);
            const std::size_t qoff = (row0 + i) * ld.q + static_cast<std::size_t>(h) * hs;
            const float* go = dout + qoff;
            float weighted = 0.f;  // sum_j P_ij dP_ij
            for (int j = 0; j <= i; ++j) {
              const std::size_t kvoff = (row0 + j) * ld.kv + kcol;
              const float dp = dot(go, v + kvoff, hs);
              dscore[j] = dp;
              weighted += row[j] * dp;
              axpy(dv + kvoff, gemm_operand<kBf16>(row[j]), go, hs);
            }
            for (int j = 0; j <= i; ++j) {
              const float ds = gemm_operand<kBf16>(row[j] * (dscore[j] - weighted) * scale);
              const std::size_t kvoff = (row0 + j) * ld.kv + kcol;
              axpy(dq + qoff, ds, k + kvoff, hs);
              axpy(dk + kvoff, ds, q + qoff, hs);
            }
          }
        }
      }
    }
  }
}

std::vector<float> rounded(const float* x, std::size_t n) {
  std::vector<float> r(n);
  round_to_bf16(r.data(), x, n);
  return r;
}
// q, k and v as the kernels read them (attention_operands.h); `round` in bf16 compute.
struct Operands {
  Operands(ActivationIn q_in, ActivationIn k_in, ActivationIn v_in, std::size_t nq, std::size_t nkv, bool round)
      : q(attention_operand(q_in, nq, round, q_copy)), k(attention_operand(k_in, nkv, round, k_copy)),
        v(attention_operand(v_in, nkv, round, v_copy)) {}
  std::vector<float> q_copy, k_copy, v_copy;
  const float *q, *k, *v;
};
// forward_t on the element types of the output and the probabilities (fp32 or bf16 each).
template <bool kBf16>
void forward_any(ActivationOut out, ActivationOut att, const float* q, const float* k, const float* v, int B, int T,
                 int NH, int KVH, int hs) {
  const auto with_output = [&](auto* o) {
    if (att.is_bf16()) forward_t<kBf16>(o, att.bf16, q, k, v, B, T, NH, KVH, hs);
    else forward_t<kBf16>(o, att.f32, q, k, v, B, T, NH, KVH, hs);
  };
  if (out.is_bf16()) with_output(out.bf16);
  else with_output(out.f32);
}

// The ops on either compute precision: bf16 compute rounds q, k, v and dout as a GPU's GEMMs would
// read them.
template <bool kBf16>
void forward_entry(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k, ActivationIn v, int B, int T,
                   int NH, int KVH, int hs) {
  const std::size_t nq = static_cast<std::size_t>(B) * T * NH * hs, nkv = static_cast<std::size_t>(B) * T * KVH * hs;
  const Operands x(q, k, v, nq, nkv, kBf16);
  forward_any<kBf16>(out, att, x.q, x.k, x.v, B, T, NH, KVH, hs);
}
template <bool kBf16>
void backward_entry(float* dq, float* dk, float* dv, const float* dout, ActivationIn q, ActivationIn k, ActivationIn v,
                    ActivationIn att, int B, int T, int NH, int KVH, int hs) {
  const std::size_t nq = static_cast<std::size_t>(B) * T * NH * hs, nkv = static_cast<std::size_t>(B) * T * KVH * hs;
  const Operands x(q, k, v, nq, nkv, kBf16);
  const std::vector<float> d16 = kBf16 ? rounded(dout, nq) : std::vector<float>();
  const float* d = kBf16 ? d16.data() : dout;
  if (att.is_bf16()) backward_t<kBf16>(dq, dk, dv, d, x.q, x.k, x.v, att.bf16, B, T, NH, KVH, hs);
  else backward_t<kBf16>(dq, dk, dv, d, x.q, x.k, x.v, att.f32, B, T, NH, KVH, hs);
}

}  // namespace

void attention_forward_gqa(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k, ActivationIn v,
                           int B, int T, int NH, int KVH, int hs) {
  forward_entry<false>(out, att, q, k, v, B, T, NH, KVH, hs);
}
void attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q, ActivationIn k,
                            ActivationIn v, ActivationIn att, int B, int T, int NH, int KVH, int hs) {
  backward_entry<false>(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, hs);
}

namespace bf16 {
void attention_forward_gqa(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k, ActivationIn v,
                           int B, int T, int NH, int KVH, int hs) {
  forward_entry<true>(out, att, q, k, v, B, T, NH, KVH, hs);
}
void attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q, ActivationIn k,
                            ActivationIn v, ActivationIn att, int B, int T, int NH, int KVH, int hs) {
  backward_entry<true>(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, hs);
}
}  // namespace bf16

// KV-cache attention with GQA (see Backend::attention_forward_kv_gqa): the new rows' k and v are
// appended, then each (position, query head) attends to its kv head's cached rows.
void attention_forward_kv_gqa(float* out, float* scores, const float* q, const float* k, const float* v,
                              float* k_cache, float* v_cache, int past, int n, int NH, int KVH, int hs) {
  const std::size_t kvw = static_cast<std::size_t>(KVH) * hs, qw = static_cast<std::size_t>(NH) * hs;
  const int G = NH / KVH, total = past + n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int i = 0; i < n; ++i)
    for (std::size_t c = 0; c < kvw; ++c) {
      k_cache[static_cast<std::size_t>(past + i) * kvw + c] = k[static_cast<std::size_t>(i) * kvw + c];
      v_cache[static_cast<std::size_t>(past + i) * kvw + c] = v[static_cast<std::size_t>(i) * kvw + c];
    }
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < NH; ++h) {
      const int pos = past + i;
      const std::size_t kcol = static_cast<std::size_t>(h / G) * hs;
      const float* qi = q + static_cast<std::size_t>(i) * qw + static_cast<std::size_t>(h) * hs;
      float* sc = scores + (static_cast<std::size_t>(i) * NH + h) * total;
      float maxv = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        const float* kj = k_cache + static_cast<std::size_t>(j) * kvw + kcol;
        float d = 0.f;
        for (int e = 0; e < hs; ++e) d += qi[e] * kj[e];
        sc[j] = d * scale;
        maxv = std::max(maxv, sc[j]);
      }
      float sum = 0.f;
      for (int j = 0; j <= pos; ++j) {
        sc[j] = std::exp(sc[j] - maxv);
        sum += sc[j];
      }
      const float inv = 1.0f / sum;
      float* o = out + static_cast<std::size_t>(i) * qw + static_cast<std::size_t>(h) * hs;
      for (int e = 0; e < hs; ++e) o[e] = 0.f;
      for (int j = 0; j <= pos; ++j) {
        const float* vj = v_cache + static_cast<std::size_t>(j) * kvw + kcol;
        const float a = sc[j] * inv;
        for (int e = 0; e < hs; ++e) o[e] += a * vj[e];
      }
    }
  }
}

}  // namespace pipelane::cpu
