// References for the graph-lane ops' tests (test_cuda_graph_ops.cpp through the backends,
// test_graph_kernels.cpp on the kernels, also under the sanitizers): tiny R-MAT graphs as CSR
// rows, a serial queue BFS, and one graph SGD iteration in double with a derived error bound.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <random>
#include <utility>
#include <vector>

#include "lanes/builtin/graph/rmat.h"

namespace pipelane::cuda_test::graph_reference {

struct Rows {  // a CSR: row r's entries others[offsets[r] .. offsets[r + 1]), stable (edge order)
  std::uint32_t n = 0;
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint32_t> others;
};

// R-MAT edges into rows by source (by_source) or destination; undirected adds each edge reversed.
inline Rows rmat_rows(int scale, int edge_factor, std::uint64_t seed, bool by_source, bool undirected) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;  // (row, other)
  for_each_rmat_edge(scale, edge_factor, seed, [&](std::uint32_t s, std::uint32_t d) {
    edges.emplace_back(by_source ? s : d, by_source ? d : s);
    if (undirected) edges.emplace_back(by_source ? d : s, by_source ? s : d);
  });
  std::stable_sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Rows g;
  g.n = 1u << scale;
  g.offsets.assign(g.n + 1, 0);
  for (const auto& [r, o] : edges) {
    ++g.offsets[r + 1];
    g.others.push_back(o);
  }
  for (std::uint32_t v = 0; v < g.n; ++v) g.offsets[v + 1] += g.offsets[v];
  return g;
}

// Serial queue BFS over out-edges (the in-edge rows reversed).
inline std::vector<std::int32_t> reference_depths(const Rows& in_edges, std::uint32_t source) {
  std::vector<std::vector<std::uint32_t>> out(in_edges.n);
  for (std::uint32_t v = 0; v < in_edges.n; ++v)
    for (std::uint64_t e = in_edges.offsets[v]; e < in_edges.offsets[v + 1]; ++e) out[in_edges.others[e]].push_back(v);
  std::vector<std::int32_t> d(in_edges.n, -1);
  std::deque<std::uint32_t> queue{source};
  d[source] = 0;
  while (!queue.empty()) {
    const std::uint32_t u = queue.front();
    queue.pop_front();
    for (const std::uint32_t v : out[u])
      if (d[v] < 0) {
        d[v] = d[u] + 1;
        queue.push_back(v);
      }
  }
  return d;
}

struct SgdData {
  Rows g;  // users' rows of items
  std::vector<float> ratings, user, item;
  int K;
};

// Ratings 1..5 and initial vectors uniform in [0, 1/sqrt(K)), from `seed`; 4 * 2^scale edges.
inline SgdData sgd_data(int K, std::uint32_t seed, int scale = 5) {
  SgdData d{rmat_rows(scale, 4, seed, /*by_source=*/true, false), {}, {}, {}, K};
  std::mt19937 rng(seed);
  d.ratings.resize(d.g.others.size());
  for (float& r : d.ratings) r = static_cast<float>(1 + rng() % 5);
  std::uniform_real_distribution<float> init(0.0f, 1.0f / std::sqrt(static_cast<float>(K)));
  d.user.resize(std::size_t{d.g.n} * K);
  d.item.resize(std::size_t{d.g.n} * K);
  for (float& x : d.user) x = init(rng);
  for (float& x : d.item) x = init(rng);
  return d;
}

inline constexpr float kRate = 0.05f, kLambda = 0.05f;

// The iteration in double, with a bound B on |fp32 value - this value| for every vector element,
// valid for any fp32 evaluation that rounds each operation once (u = 2^-24) and sums a dot product
// of K products in any order (the CPU's sequential sum, the warp's butterfly, fused or not):
//   dot: |d^ - d| <= g_K sum (|p|+Bp)(|q|+Bq) + sum (|q| Bp + |p| Bq + Bp Bq)       =: D
//        (g_n = n u / (1 - n u): K roundings at most along any summation tree of K products)
//   err = r - dot: |e^ - e| <= D + u (|e| + D)                                      =: E
//   p' = p + s (e q - l p): Bp' = |1 - s l| Bp + s (E (|q| + Bq) + |e| Bq) + g_5 M_p,
//        M_p = (|p| + Bp) + s ((|e| + E)(|q| + Bq) + l (|p| + Bp)) (five roundings: e q, l p, the
//        difference, s times it, the sum; each at most u times a term bounded by M_p);
//   q' likewise from the old p. RMSE: the squared errors in double, |e^2 - e'^2| <= E (2|e| + E).
// The double evaluation's own error (~2^-53 relative per operation) is covered by adding 2^-40
// relative to every comparison.
struct SgdReference {
  std::vector<double> user, item, user_bound, item_bound;
  double squared_error = 0, squared_error_bound = 0;
};

inline SgdReference reference_sgd(const SgdData& d) {
  const int K = d.K;
  const double u = std::ldexp(1.0, -24);
  const auto gamma = [u](double n) { return n * u / (1 - n * u); };
  SgdReference r{std::vector<double>(d.user.begin(), d.user.end()), std::vector<double>(d.item.begin(), d.item.end()),
                 std::vector<double>(d.user.size(), 0.0), std::vector<double>(d.item.size(), 0.0)};
  const double s = kRate, l = kLambda;
  const auto edge_error = [&](std::uint32_t row, std::uint64_t e, double* err, double* err_bound) {
    const std::size_t pu = std::size_t{row} * K, qv = std::size_t{d.g.others[e]} * K;
    double dot = 0, magnitude = 0, carried = 0;
    for (int k = 0; k < K; ++k) {
      const double p = r.user[pu + k], q = r.item[qv + k], bp = r.user_bound[pu + k], bq = r.item_bound[qv + k];
      dot += p * q;
      magnitude += (std::fabs(p) + bp) * (std::fabs(q) + bq);
      carried += std::fabs(q) * bp + std::fabs(p) * bq + bp * bq;
    }
    const double D = gamma(K) * magnitude + carried;
    *err = d.ratings[e] - dot;
    *err_bound = D + u * (std::fabs(*err) + D);
  };
  for (std::uint32_t row = 0; row < d.g.n; ++row)
    for (std::uint64_t e = d.g.offsets[row]; e < d.g.offsets[row + 1]; ++e) {
      double err, E;
      edge_error(row, e, &err, &E);
      const std::size_t pu = std::size_t{row} * K, qv = std::size_t{d.g.others[e]} * K;
      for (int k = 0; k < K; ++k) {
        const double p = r.user[pu + k], q = r.item[qv + k], bp = r.user_bound[pu + k], bq = r.item_bound[qv + k];
        const double mp = (std::fabs(p) + bp) + s * ((std::fabs(err) + E) * (std::fabs(q) + bq) + l * (std::fabs(p) + bp));
        const double mq = (std::fabs(q) + bq) + s * ((std::fabs(err) + E) * (std::fabs(p) + bp) + l * (std::fabs(q) + bq));
        r.user[pu + k] = p + s * (err * q - l * p);
        r.item[qv + k] = q + s * (err * p - l * q);
        r.user_bound[pu + k] = std::fabs(1 - s * l) * bp + s * (E * (std::fabs(q) + bq) + std::fabs(err) * bq) + gamma(5) * mp;
        r.item_bound[qv + k] = std::fabs(1 - s * l) * bq + s * (E * (std::fabs(p) + bp) + std::fabs(err) * bp) + gamma(5) * mq;
      }
    }
  for (std::uint32_t row = 0; row < d.g.n; ++row)
    for (std::uint64_t e = d.g.offsets[row]; e < d.g.offsets[row + 1]; ++e) {
      double err, E;
      edge_error(row, e, &err, &E);
      r.squared_error += err * err;
      r.squared_error_bound += E * (2 * std::fabs(err) + E);
    }
  return r;
}

}  // namespace pipelane::cuda_test::graph_reference
