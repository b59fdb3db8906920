#include "runtime/cuda/plans/gqa_gemm_plan.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pipelane::cuda {

namespace {

// Per-kv-head strides: a query group [G*T, hs], a kv head [T, hs], a group's scores [G*T, T].
struct GroupStrides {
  std::int64_t group_rows;  // G*T
  std::int64_t q, kv, att;
};
GroupStrides strides(const GqaShape& s) {
  if (s.KVH <= 0 || s.NH % s.KVH != 0)
    throw std::invalid_argument("GQA GEMM plan: kv_heads " + std::to_string(s.KVH) + " must divide heads " +
                                std::to_string(s.NH));
  const std::int64_t gt = static_cast<std::int64_t>(s.group()) * s.T;
  return {gt, gt * s.hs, static_cast<std::int64_t>(s.T) * s.hs, gt * s.T};
}

GemmCall batched(const GqaShape& s, Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, Operand a,
                 Operand b, void* d, GemmTypes act, std::int64_t ldd, std::int64_t d_stride) {
  GemmCall g;
  g.transa = ta, g.transb = tb;
  g.m = static_cast<int>(m), g.n = static_cast<int>(n), g.k = static_cast<int>(k);
  g.batch = s.B * s.KVH;
  g.a = a, g.b = b;
  g.c = Operand{d, act.output, ldd, d_stride};
  g.d = d;
  return g;
}

}  // namespace

GemmCall gqa_scores_gemm(void* preatt, const void* q, const void* k, const GqaShape& s, GemmTypes act) {
  // preatt^T[j, i'] = k[j,:] . q[i',:] over the group's G*T rows i': k transposed, q as stored.
  const GroupStrides st = strides(s);
  return batched(s, Trans::T, Trans::N, s.T, st.group_rows, s.hs, row_major(k, act.operands, s.hs, st.kv),
                 row_major(q, act.operands, s.hs, st.q), preatt, act, s.T, st.att);
}

GemmCall gqa_values_gemm(void* y, const void* att, const void* v, const GqaShape& s, GemmTypes act) {
  // y^T[hs, G*T] = v^T[hs,T] @ att^T[T, G*T]: both as stored.
  const GroupStrides st = strides(s);
  return batched(s, Trans::N, Trans::N, s.hs, st.group_rows, s.T, row_major(v, act.operands, s.hs, st.kv),
                 row_major(att, act.operands, s.T, st.att), y, act, s.hs, st.q);
}

std::vector<GemmCall> gqa_values_backward_gemms(void* datt, void* dv, const void* dy, const void* att, const void* v,
                                                const GqaShape& s, GemmTypes act) {
  const GroupStrides st = strides(s);
  return {
      // datt^T[j, i'] = v[j,:] . dy[i',:]
      batched(s, Trans::T, Trans::N, s.T, st.group_rows, s.hs, row_major(v, act.operands, s.hs, st.kv),
              row_major(dy, act.operands, s.hs, st.q), datt, act, s.T, st.att),
      // dv^T[hs, T] = dy^T[hs, G*T] @ att[G*T, T]: att (column-major att^T) transposed
      batched(s, Trans::N, Trans::T, s.hs, s.T, st.group_rows, row_major(dy, act.operands, s.hs, st.q),
              row_major(att, act.operands, s.T, st.att), dv, act, s.hs, st.kv),
  };
}

std::vector<GemmCall> gqa_scores_backward_gemms(void* dq, void* dk, const void* dpreatt, const void* q,
                                                const void* k, const GqaShape& s, GemmTypes act) {
  const GroupStrides st = strides(s);
  return {
      // dq^T[hs, G*T] = k^T[hs,T] @ dpreatt^T[T, G*T]
      batched(s, Trans::N, Trans::N, s.hs, st.group_rows, s.T, row_major(k, act.operands, s.hs, st.kv),
              row_major(dpreatt, act.operands, s.T, st.att), dq, act, s.hs, st.q),
      // dk^T[hs, T] = q^T[hs, G*T] @ dpreatt[G*T, T]
      batched(s, Trans::N, Trans::T, s.hs, s.T, st.group_rows, row_major(q, act.operands, s.hs, st.q),
              row_major(dpreatt, act.operands, s.T, st.att), dk, act, s.hs, st.kv),
  };
}

}  // namespace pipelane::cuda
