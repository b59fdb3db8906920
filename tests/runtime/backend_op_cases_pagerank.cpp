// The op table's PageRank step as a backend op case: one iteration of a small graph (isolated
// vertices, vertices without out-edges, a hub) in two slices with an odd boundary, against a double
// power-iteration step. Its bit-for-bit parity between backends is tests/cuda/test_cuda_pagerank_op.cpp's.
#include <cmath>
#include <cstring>

#include "tests/runtime/backend_op_cases.h"

namespace pipelane::backend_ops {

namespace {
// The fp32 in-edge sums run over at most ~20 terms (kReduction's reasoning, backend_op_cases.cpp).
constexpr double kReduction = 1e-10;
}  // namespace

void add_pagerank_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  constexpr std::uint32_t n = 37;
  constexpr float damping = 0.85f;
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::uint32_t> sources, degree(n, 0);
  for (std::uint32_t v = 0; v < n; ++v) {
    const std::uint32_t deg = v == 0 ? 20 : (v % 5 == 3 ? 0 : rng() % 6);
    for (std::uint32_t k = 0; k < deg; ++k) {
      std::uint32_t u = rng() % n;
      if (u % 7 == 6) u = (u + 1) % n;  // every 7th vertex has no out-edges
      sources.push_back(u);
      ++degree[u];
    }
    offsets.push_back(sources.size());
  }
  std::vector<float> rank(n), contrib(n);
  for (std::uint32_t v = 0; v < n; ++v) {
    rank[v] = (1.0f + static_cast<float>(rng() % 100) / 100.0f) / n;
    contrib[v] = degree[v] == 0 ? 0.0f : rank[v] / static_cast<float>(degree[v]);
  }
  const float base = 0.15f / n + 0.01f;
  cases.push_back(
      {OpKind::PagerankStep, "pagerank_step (37 vertices, slices [0,16) [16,37))", kReduction,
       [=](DeviceBuffers& b, bool poison) {
         float* rank_out = b.zeros(n);
         float* contrib_out = b.zeros(n);
         float* delta = b.zeros(n);
         PagerankState initial;
         initial.base = base;
         // State and graph as floats' worth of bytes: the harness's buffers are float buffers.
         const auto as_floats = [](const void* p, std::size_t bytes) {
           std::vector<float> f((bytes + 3) / 4);
           std::memcpy(f.data(), p, bytes);
           return f;
         };
         auto* state = reinterpret_cast<PagerankState*>(b.upload(as_floats(&initial, sizeof initial)));
         const auto* off = reinterpret_cast<const std::uint64_t*>(b.upload(as_floats(offsets.data(), offsets.size() * 8)));
         const auto* src = reinterpret_cast<const std::uint32_t*>(b.upload(as_floats(sources.data(), sources.size() * 4)));
         const auto* deg = reinterpret_cast<const std::uint32_t*>(b.upload(as_floats(degree.data(), degree.size() * 4)));
         const float* rin = b.upload(rank);
         const float* cin = b.upload(poisoned_first(contrib, poison));
         for (const auto& [v0, v1] : {std::pair<std::uint32_t, std::uint32_t>{0, 16}, {16, n}})
           b.backend().pagerank_step(PagerankStep{off, src, deg, n, rin, cin, rank_out, contrib_out, delta, state,
                                                  damping, 0.0, 100, v0, v1},
                                     b.stream());
         const std::vector<float> s = b.download(reinterpret_cast<const float*>(state), sizeof(PagerankState) / 4);
         PagerankState after;
         std::memcpy(static_cast<void*>(&after), s.data(), sizeof after);
         return Outputs{{"rank", b.download(rank_out, n)},
                        {"contrib", b.download(contrib_out, n)},
                        {"delta", b.download(delta, n)},
                        {"residual, base", {static_cast<float>(after.residual), after.base}}};
       },
       [=] {
         ref::Vec r(n), c(n), d(n);
         double residual = 0, dangling = 0;
         for (std::uint32_t v = 0; v < n; ++v) {
           double acc = 0;
           for (std::uint64_t e = offsets[v]; e < offsets[v + 1]; ++e) acc += contrib[sources[e]];
           r[v] = base + static_cast<double>(damping) * acc;
           c[v] = degree[v] == 0 ? 0.0 : r[v] / degree[v];
           d[v] = std::fabs(r[v] - rank[v]);
           residual += d[v];
           if (degree[v] == 0) dangling += r[v];
         }
         const double next_base = (1.0 - damping) / n + damping * dangling / n;
         return Expected{{"rank", r}, {"contrib", c}, {"delta", d}, {"residual, base", {residual, next_base}}};
       }});
}

}  // namespace pipelane::backend_ops
