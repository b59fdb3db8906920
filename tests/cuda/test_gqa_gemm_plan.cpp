// The grouped-query attention's cuBLASLt calls (plans/gqa_gemm_plan.h), executed by the column-
// major GEMM interpreter, against a row-major double reference written from the definition (query
// head h reads kv head h / G, dk and dv summed over the group): proves the grouped batch (B*KVH
// products with m or n = G*T), leading dimensions and strides on the CPU. The interpreter sums in
// double and rounds once, the reference is double: NMSE limit 1e-13 (one fp32 rounding, u^2 =
// 3.6e-15, with margin). At G = 1 the calls are the MHA plans of gemm_plan.h, field for field.
#include <gtest/gtest.h>

#include <random>

#include "runtime/cuda/emu/gemm_interpreter.h"
#include "runtime/cuda/plans/gqa_gemm_plan.h"
#include "tests/cuda/compare.h"

namespace pipelane::cuda_test {
namespace {

using cuda::GqaShape;

constexpr double kNmse = 1e-13;

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}
Vec doubles(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// Row-major [rows, cols] blocks: element (i, j) of block r of a tensor with blocks of rows x cols.
struct Blocks {
  const std::vector<float>& x;
  int rows, cols;
  double at(std::size_t r, int i, int j) const { return x[(r * rows + i) * cols + j]; }
};

TEST(GqaGemmPlan, GroupedProductsMatchTheDefinition) {
  for (const GqaShape s : {GqaShape{2, 5, 4, 2, 6}, GqaShape{1, 1, 3, 1, 10}, GqaShape{1, 7, 6, 3, 33},
                           GqaShape{2, 3, 2, 2, 4}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " KVH=" << s.KVH
                                      << " hs=" << s.hs);
    std::mt19937 rng(31u * s.T + s.hs);
    const int G = s.group(), T = s.T, hs = s.hs, BNH = s.B * s.NH, BKV = s.B * s.KVH;
    const std::size_t nq = static_cast<std::size_t>(BNH) * T * hs, nkv = static_cast<std::size_t>(BKV) * T * hs;
    const std::size_t na = static_cast<std::size_t>(BNH) * T * T;
    const auto q = random_floats(rng, nq), k = random_floats(rng, nkv), v = random_floats(rng, nkv);
    const auto att = random_floats(rng, na), dy = random_floats(rng, nq), dpre = random_floats(rng, na);
    std::vector<float> preatt(na), y(nq), datt(na), dv(nkv), dq(nq), dk(nkv);
    cuda_emu::run_gemm(cuda::gqa_scores_gemm(preatt.data(), q.data(), k.data(), s, cuda::DataType::F32));
    cuda_emu::run_gemm(cuda::gqa_values_gemm(y.data(), att.data(), v.data(), s, cuda::DataType::F32));
    for (const auto& g : cuda::gqa_values_backward_gemms(datt.data(), dv.data(), dy.data(), att.data(), v.data(), s,
                                                         cuda::DataType::F32))
      cuda_emu::run_gemm(g);
    for (const auto& g : cuda::gqa_scores_backward_gemms(dq.data(), dk.data(), dpre.data(), q.data(), k.data(), s,
                                                         cuda::DataType::F32))
      cuda_emu::run_gemm(g);
    const Blocks Q{q, T, hs}, K{k, T, hs}, V{v, T, hs}, A{att, T, T}, DY{dy, T, hs}, DP{dpre, T, T};
    Vec w_pre(na), w_y(nq), w_datt(na), w_dv(nkv, 0.0), w_dq(nq), w_dk(nkv, 0.0);
    for (int r = 0; r < BNH; ++r) {
      const std::size_t kv = static_cast<std::size_t>(r) / G;  // (b*NH + h)/G = b*KVH + h/G
      for (int i = 0; i < T; ++i) {
        for (int j = 0; j < T; ++j) {
          double s1 = 0, s2 = 0;
          for (int d = 0; d < hs; ++d) s1 += Q.at(r, i, d) * K.at(kv, j, d), s2 += DY.at(r, i, d) * V.at(kv, j, d);
          w_pre[(static_cast<std::size_t>(r) * T + i) * T + j] = s1;
          w_datt[(static_cast<std::size_t>(r) * T + i) * T + j] = s2;
        }
        for (int d = 0; d < hs; ++d) {
          double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
          for (int j = 0; j < T; ++j) {
            s1 += A.at(r, i, j) * V.at(kv, j, d);
            s2 += DP.at(r, i, j) * K.at(kv, j, d);
            s3 += A.at(r, j, i) * DY.at(r, j, d);   // (att^T dy)[i, d] of this query head
            s4 += DP.at(r, j, i) * Q.at(r, j, d);   // (dpre^T q)[i, d]
          }
          w_y[(static_cast<std::size_t>(r) * T + i) * hs + d] = s1;
          w_dq[(static_cast<std::size_t>(r) * T + i) * hs + d] = s2;
          w_dv[(kv * T + i) * hs + d] += s3;
          w_dk[(kv * T + i) * hs + d] += s4;
        }
      }
    }
    const Tolerance tol{kNmse};
    EXPECT_TRUE(compare("preatt", doubles(preatt), w_pre, tol, false));
    EXPECT_TRUE(compare("y", doubles(y), w_y, tol, false));
    EXPECT_TRUE(compare("datt", doubles(datt), w_datt, tol, false));
    EXPECT_TRUE(compare("dv", doubles(dv), w_dv, tol, false));
    EXPECT_TRUE(compare("dq", doubles(dq), w_dq, tol, false));
    EXPECT_TRUE(compare("dk", doubles(dk), w_dk, tol, false));
  }
}

bool same_call(const cuda::GemmCall& a, const cuda::GemmCall& b) {
  const auto same = [](const cuda::Operand& x, const cuda::Operand& y) {
    return x.ptr == y.ptr && x.type == y.type && x.ld == y.ld && x.batch_stride == y.batch_stride;
  };
  return a.transa == b.transa && a.transb == b.transb && a.m == b.m && a.n == b.n && a.k == b.k &&
         a.batch == b.batch && same(a.a, b.a) && same(a.b, b.b) && same(a.c, b.c) && a.d == b.d &&
         a.alpha == b.alpha && a.beta == b.beta && a.epilogue == b.epilogue;
}

TEST(GqaGemmPlan, OneQueryHeadPerKvHeadIsTheMhaPlan) {
  float buf[6][1];
  const GqaShape s{2, 7, 3, 3, 5};
  const int BNH = s.B * s.NH;
  const auto t = cuda::DataType::BF16;
  EXPECT_TRUE(same_call(cuda::gqa_scores_gemm(buf[0], buf[1], buf[2], s, t),
                        cuda::attention_scores_gemm(buf[0], buf[1], buf[2], BNH, s.T, s.hs, t)));
  EXPECT_TRUE(same_call(cuda::gqa_values_gemm(buf[0], buf[1], buf[2], s, t),
                        cuda::attention_values_gemm(buf[0], buf[1], buf[2], BNH, s.T, s.hs, t)));
  const auto gv = cuda::gqa_values_backward_gemms(buf[0], buf[1], buf[2], buf[3], buf[4], s, t);
  const auto mv = cuda::attention_values_backward_gemms(buf[0], buf[1], buf[2], buf[3], buf[4], BNH, s.T, s.hs, t);
  const auto gs = cuda::gqa_scores_backward_gemms(buf[0], buf[1], buf[2], buf[3], buf[4], s, t);
  const auto ms = cuda::attention_scores_backward_gemms(buf[0], buf[1], buf[2], buf[3], buf[4], BNH, s.T, s.hs, t);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(same_call(gv[i], mv[i])) << "values backward " << i;
    EXPECT_TRUE(same_call(gs[i], ms[i])) << "scores backward " << i;
  }
}

TEST(GqaGemmPlan, KvHeadsThatDoNotDivideTheHeadsAreRefused) {
  float x[1];
  EXPECT_THROW(cuda::gqa_scores_gemm(x, x, x, GqaShape{1, 4, 6, 4, 8}, cuda::DataType::F32), std::invalid_argument);
}

}  // namespace
}  // namespace pipelane::cuda_test
