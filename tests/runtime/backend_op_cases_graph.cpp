// The op table's graph-lane steps as backend op cases: a pull BFS over a small graph (two
// traversals, each pass in two slices with an odd boundary) against a serial queue BFS, and one
// graph SGD iteration (update and RMSE passes, each in two slices, the first ending mid-row)
// against the same iteration in double. Their parity between backends (bit for bit for BFS, within
// a derived bound for SGD) is tests/cuda/test_cuda_graph_ops.cpp's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include "tests/runtime/backend_op_cases.h"

namespace pipelane::backend_ops {

namespace {
// BFS depths and counts are integers, exact on every backend.
constexpr double kExact = 0.0;
// SGD: each vector is touched by a handful of edges of K = 8 fp32 products: relative error a few
// times K * 2^-24 ~ 5e-7 per value, NMSE <= ~1e-12 -> 1e-10 (a wrong update gives >= 1e-4).
constexpr double kSgd = 1e-10;

template <typename T>
std::vector<float> as_floats(const std::vector<T>& v) {
  std::vector<float> f((v.size() * sizeof(T) + 3) / 4 + 1);
  std::memcpy(f.data(), v.data(), v.size() * sizeof(T));
  return f;
}

struct SmallGraph {
  std::uint32_t n;
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::uint32_t> others;
};

// Row v's entries drawn at random, some rows empty; vertex 0 a hub.
SmallGraph random_rows(std::uint32_t n, std::uint32_t max_degree, std::mt19937& rng) {
  SmallGraph g;
  g.n = n;
  for (std::uint32_t v = 0; v < n; ++v) {
    const std::uint32_t deg = v == 0 ? 12 : (v % 6 == 5 ? 0 : rng() % (max_degree + 1));
    for (std::uint32_t k = 0; k < deg; ++k) g.others.push_back(rng() % n);
    g.offsets.push_back(g.others.size());
  }
  return g;
}
}  // namespace

void add_graph_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  {
    const SmallGraph g = random_rows(41, 3, rng);  // in-edges: others[] are sources
    const std::uint32_t n = g.n;
    const std::int64_t traversals = 2;
    cases.push_back(
        {OpKind::BfsStep, "bfs_step (41 vertices, 2 traversals, slices [0,17) [17,41))", kExact,
         [=](DeviceBuffers& b, bool) {
           const auto* off = reinterpret_cast<const std::uint64_t*>(b.upload(as_floats(g.offsets)));
           const auto* src = reinterpret_cast<const std::uint32_t*>(b.upload(as_floats(g.others)));
           std::int32_t* depth[2] = {reinterpret_cast<std::int32_t*>(b.zeros(n)),
                                     reinterpret_cast<std::int32_t*>(b.zeros(n))};
           std::vector<BfsState> initial(1);
           initial[0].source = 5;  // first_source
           auto* state = reinterpret_cast<BfsState*>(b.upload(as_floats(initial)));
           auto* records = reinterpret_cast<BfsTraversalRecord*>(b.zeros(traversals * sizeof(BfsTraversalRecord) / 4));
           auto* levels = reinterpret_cast<std::uint64_t*>(b.zeros(traversals * kBfsRecordedLevels * 2));
           // Passes until done (at most n + 1 per traversal), and one more that must change nothing.
           std::vector<float> raw;
           BfsState after;
           for (std::uint32_t pass = 0, extra = 0; pass < 2 * (n + 2) && extra < 2; ++pass) {
             const int in = pass % 2;
             for (const auto& [v0, v1] : {std::pair<std::uint32_t, std::uint32_t>{0, 17}, {17, n}})
               b.backend().bfs_step(BfsStep{off, src, n, depth[in], depth[1 - in], state, records, levels,
                                            static_cast<std::uint32_t>(traversals), 5, traversals, v0, v1},
                                    b.stream());
             raw = b.download(reinterpret_cast<const float*>(state), sizeof(BfsState) / 4);
             std::memcpy(static_cast<void*>(&after), raw.data(), sizeof after);
             extra += after.done;
           }
           raw = b.download(reinterpret_cast<const float*>(depth[after.passes % 2]), n);
           std::vector<float> depths(n);
           for (std::uint32_t v = 0; v < n; ++v) {
             std::int32_t d;
             std::memcpy(&d, &raw[v], 4);
             depths[v] = static_cast<float>(d);
           }
           raw = b.download(reinterpret_cast<const float*>(records), traversals * sizeof(BfsTraversalRecord) / 4);
           std::vector<BfsTraversalRecord> rec(traversals);
           std::memcpy(static_cast<void*>(rec.data()), raw.data(), rec.size() * sizeof(BfsTraversalRecord));
           std::vector<float> summary = {static_cast<float>(after.done), static_cast<float>(after.traversal)};
           for (const BfsTraversalRecord& r : rec)
             summary.insert(summary.end(), {static_cast<float>(r.source), static_cast<float>(r.reached),
                                            static_cast<float>(r.levels)});
           return Outputs{{"last traversal's depths", depths}, {"done, traversals, records", summary}};
         },
         [=] {
           // Serial BFS over out-edges (the reverse of the in-edge rows), from 5 then 6.
           std::vector<std::vector<std::uint32_t>> out(n);
           for (std::uint32_t v = 0; v < n; ++v)
             for (std::uint64_t e = g.offsets[v]; e < g.offsets[v + 1]; ++e) out[g.others[e]].push_back(v);
           ref::Vec depths;
           ref::Vec summary = {1.0, static_cast<double>(traversals)};
           for (std::uint32_t s = 5; s < 5 + traversals; ++s) {
             std::vector<int> d(n, -1);
             std::deque<std::uint32_t> queue{s};
             d[s] = 0;
             int deepest = 0;
             while (!queue.empty()) {
               const std::uint32_t u = queue.front();
               queue.pop_front();
               for (std::uint32_t v : out[u])
                 if (d[v] < 0) {
                   d[v] = d[u] + 1;
                   deepest = std::max(deepest, d[v]);
                   queue.push_back(v);
                 }
             }
             double reached = 0;
             for (int x : d) reached += x >= 0;
             summary.insert(summary.end(), {static_cast<double>(s), reached, static_cast<double>(deepest + 1)});
             depths.assign(d.begin(), d.end());
           }
           return Expected{{"last traversal's depths", depths}, {"done, traversals, records", summary}};
         }});
  }
  {
    const SmallGraph g = random_rows(23, 4, rng);  // users' rows of items
    const std::uint32_t n = g.n;
    const int K = 8;
    const auto m = static_cast<std::uint64_t>(g.others.size());
    std::vector<float> ratings(m), user(n * K), item(n * K);
    for (float& r : ratings) r = static_cast<float>(1 + rng() % 5);
    for (float& x : user) x = static_cast<float>(rng() % 1000) / 3000.0f;
    for (float& x : item) x = static_cast<float>(rng() % 1000) / 3000.0f;
    const float lr = 0.01f, lambda = 0.05f;
    // The first slice ends inside row 0 (the hub's 12 edges).
    const std::uint64_t cut = 5;
    cases.push_back(
        {OpKind::GraphSgdStep, "graphsgd_step (23 users, K 8, update and RMSE passes in two slices)", kSgd,
         [=](DeviceBuffers& b, bool poison) {
           const auto* off = reinterpret_cast<const std::uint64_t*>(b.upload(as_floats(g.offsets)));
           const auto* items = reinterpret_cast<const std::uint32_t*>(b.upload(as_floats(g.others)));
           const float* r = b.upload(poisoned_first(ratings, poison));
           float* p = b.upload(user);
           float* q = b.upload(item);
           auto* state = reinterpret_cast<GraphSgdState*>(b.upload(as_floats(std::vector<GraphSgdState>(1))));
           double* history = reinterpret_cast<double*>(b.zeros(2));
           for (std::uint32_t pass = 0; pass < 2; ++pass)
             for (const auto& [e0, e1] : {std::pair<std::uint64_t, std::uint64_t>{0, cut}, {cut, m}})
               b.backend().graphsgd_step(GraphSgdStep{off, items, r, n, m, p, q, K, lr, lambda, state, history, 1, 0.0,
                                                      10, pass, 0, e0, e1},
                                         b.stream());
           const std::vector<float> raw = b.download(reinterpret_cast<const float*>(state), sizeof(GraphSgdState) / 4);
           GraphSgdState after;
           std::memcpy(static_cast<void*>(&after), raw.data(), sizeof after);
           return Outputs{{"user", b.download(p, n * K)},
                          {"item", b.download(q, n * K)},
                          {"rmse, iterations", {static_cast<float>(after.rmse), static_cast<float>(after.iterations)}}};
         },
         [=] {
           ref::Vec p(user.begin(), user.end()), q(item.begin(), item.end());
           auto dot = [&](std::uint32_t u, std::uint32_t v) {
             double s = 0;
             for (int k = 0; k < K; ++k) s += p[u * K + k] * q[v * K + k];
             return s;
           };
           for (std::uint32_t u = 0; u < n; ++u)
             for (std::uint64_t e = g.offsets[u]; e < g.offsets[u + 1]; ++e) {
               const std::uint32_t v = g.others[e];
               const double err = ratings[e] - dot(u, v);
               for (int k = 0; k < K; ++k) {
                 const double pk = p[u * K + k], qk = q[v * K + k];
                 p[u * K + k] = pk + lr * (err * qk - lambda * pk);
                 q[v * K + k] = qk + lr * (err * pk - lambda * qk);
               }
             }
           double sum = 0;
           for (std::uint32_t u = 0; u < n; ++u)
             for (std::uint64_t e = g.offsets[u]; e < g.offsets[u + 1]; ++e) {
               const double err = ratings[e] - dot(u, g.others[e]);
               sum += err * err;
             }
           return Expected{{"user", p}, {"item", q}, {"rmse, iterations", {std::sqrt(sum / m), 1.0}}};
         }});
  }
}

}  // namespace pipelane::backend_ops
