#include "lanes/builtin/pagerank_lane.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

namespace pipelane {
namespace {

constexpr std::uint64_t kMaxVertexId = 0xFFFFFFFEull;  // ids are stored as uint32

// ---- base64 (state blobs) -------------------------------------------------------------------
const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t b0 = p[i], b1 = i + 1 < n ? p[i + 1] : 0, b2 = i + 2 < n ? p[i + 2] : 0;
    const std::uint32_t v = (b0 << 16) | (b1 << 8) | b2;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kB64[v & 63] : '=';
  }
  return out;
}

void base64_decode_into(const std::string& s, void* dst, std::size_t n, const char* what) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (s.size() != (n + 2) / 3 * 4)
    throw LaneError(std::string("pagerank: saved state: ") + what + " has the wrong length");
  auto* out = static_cast<unsigned char*>(dst);
  std::size_t o = 0;
  for (std::size_t i = 0; i < s.size(); i += 4) {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + k];
      const int x = c == '=' ? 0 : val(c);
      if (x < 0) throw LaneError(std::string("pagerank: saved state: ") + what + " is not base64");
      v = (v << 6) | static_cast<std::uint32_t>(x);
    }
    for (int k = 0; k < 3 && o < n; ++k) out[o++] = static_cast<unsigned char>(v >> (16 - 8 * k));
  }
}

// ---- SNAP edge-list reader ------------------------------------------------------------------
// Calls emit(src, dst) for every edge line; a malformed line is a LaneError naming file and line.
template <typename Emit>
void read_edge_list(const std::string& path, Emit&& emit) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) throw LaneError("pagerank: cannot open graph '" + path + "': " + std::strerror(errno));
  char* line = nullptr;
  std::size_t cap = 0;
  std::uint64_t lineno = 0;
  std::string error;
  ssize_t len;
  while ((len = ::getline(&line, &cap, f)) >= 0) {
    ++lineno;
    const char* p = line;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') ++p;
    if (*p == '\0' || *p == '#') continue;
    std::uint64_t ids[2] = {0, 0};
    bool ok = true;
    for (int k = 0; k < 2 && ok; ++k) {
      while (*p == ' ' || *p == '\t') ++p;
      if (*p < '0' || *p > '9') { ok = false; break; }
      std::uint64_t v = 0;
      while (*p >= '0' && *p <= '9') {
        v = v * 10 + static_cast<std::uint64_t>(*p - '0');
        if (v > kMaxVertexId) { ok = false; break; }
        ++p;
      }
      ids[k] = v;
      if (ok && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != '\0') ok = false;
    }
    while (ok && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) ++p;
    if (!ok || *p != '\0') {
      std::string text(line, static_cast<std::size_t>(len));
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      if (text.size() > 80) text = text.substr(0, 80) + "...";
      error = path + ":" + std::to_string(lineno) + ": malformed edge '" + text +
              "' (expected 'src dst', non-negative integer ids up to " +
              std::to_string(kMaxVertexId) + ")";
      break;
    }
    emit(static_cast<std::uint32_t>(ids[0]), static_cast<std::uint32_t>(ids[1]));
  }
  const bool read_error = std::ferror(f) != 0;
  std::free(line);
  std::fclose(f);
  if (!error.empty()) throw LaneError("pagerank: " + error);
  if (read_error) throw LaneError("pagerank: error reading graph '" + path + "'");
}

class PageRankLane final : public Lane {
 public:
  std::string name() const override { return "pagerank"; }
  std::string work_unit() const override { return "edges"; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    graph_path_ = o.get_string("graph", "");
    generate_ = o.get_string("generate", "");
    scale_ = static_cast<int>(o.get_int("scale", 16, 1, 31));
    edge_factor_ = o.get_int("edge_factor", 16, 1, 1024);
    seed_ = static_cast<std::uint64_t>(o.get_int("seed", 1, 0, INT64_MAX));
    damping_ = o.get_double("damping", 0.85, 0.0, 1.0);
    tolerance_ = o.get_double("tolerance", 1e-8, 0.0, 1e9);
    max_iterations_ = o.get_int("max_iterations", 100, 1, 100000000);
    slice_edges_ = o.get_int("slice_edges", 1 << 21, 1, INT64_MAX);
    top_k_ = o.get_int("top_k", 10, 0, 100000000);
    o.reject_unknown();
    if (graph_path_.empty() == generate_.empty())
      throw LaneError("[lane.pagerank]: set exactly one of 'graph = PATH' or 'generate = rmat'");
    if (!generate_.empty() && generate_ != "rmat")
      throw LaneError("[lane.pagerank] generate = '" + generate_ + "': expected 'rmat'");
    if (generate_.empty() && (o.has("scale") || o.has("edge_factor") || o.has("seed")))
      throw LaneError("[lane.pagerank]: scale/edge_factor/seed apply only to 'generate = rmat'");
    output_dir_ = ctx.output_dir;

    try {
      build_graph(ctx.arena);
    } catch (const ArenaQuotaError& e) {
      throw LaneError(std::string("pagerank: graph does not fit the lane's memory quota: ") + e.what());
    }
    start();
  }

  double step(LaneContext&) override {
    if (finished_) return 0.0;
    std::int64_t budget = slice_edges_;
    std::uint64_t edges_done = 0;
    const double base = (1.0 - damping_) / static_cast<double>(n_) +
                        damping_ * dangling_ / static_cast<double>(n_);
    while (budget > 0 && v_ < n_) {
      const std::uint64_t end = off_[v_ + 1];
      const std::uint64_t take = std::min<std::uint64_t>(end - e_, static_cast<std::uint64_t>(budget));
      double acc = acc_;
      const std::uint32_t* s = src_ + e_;
      for (std::uint64_t i = 0; i < take; ++i) acc += contrib_[s[i]];
      acc_ = acc;
      e_ += take;
      edges_done += take;
      budget -= static_cast<std::int64_t>(take);
      if (e_ == end) {
        const double r = base + damping_ * acc_;
        residual_acc_ += std::fabs(r - rank_[v_]);
        rank_[v_] = r;
        if (outdeg_[v_] == 0) {
          next_dangling_ += r;
          next_contrib_[v_] = 0.0;
        } else {
          next_contrib_[v_] = r / outdeg_[v_];
        }
        acc_ = 0.0;
        ++v_;
        --budget;  // a vertex finalized is one unit of work too (isolated vertices have no edges)
      }
    }
    edges_processed_ += edges_done;
    if (v_ == n_) end_iteration();
    return static_cast<double>(edges_done);
  }

  bool finished() const override { return finished_; }

  std::string save() const override {
    nlohmann::json j;
    j["vertices"] = n_;
    j["edges"] = m_;
    j["iteration"] = iteration_;
    j["vertex"] = v_;
    j["edge"] = e_;
    j["finished"] = finished_;
    j["converged"] = converged_;
    j["residual"] = residual_;
    j["edges_processed"] = edges_processed_;
    // Doubles that must resume bit-exactly travel as raw bytes.
    const double scalars[4] = {acc_, dangling_, next_dangling_, residual_acc_};
    j["scalars"] = base64_encode(scalars, sizeof scalars);
    j["rank"] = base64_encode(rank_, n_ * sizeof(double));
    j["contrib"] = base64_encode(contrib_, n_ * sizeof(double));
    return j.dump();
  }

  void load(const std::string& state) override {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(state);
      if (j.at("vertices").get<std::uint64_t>() != n_ || j.at("edges").get<std::uint64_t>() != m_)
        throw LaneError("pagerank: saved state is for a graph of " +
                        std::to_string(j.at("vertices").get<std::uint64_t>()) + " vertices / " +
                        std::to_string(j.at("edges").get<std::uint64_t>()) + " edges, this one has " +
                        std::to_string(n_) + " / " + std::to_string(m_));
      const auto v = j.at("vertex").get<std::uint64_t>();
      const auto e = j.at("edge").get<std::uint64_t>();
      if (v > n_ || (v < n_ && (e < off_[v] || e > off_[v + 1])) || (v == n_ && e != m_))
        throw LaneError("pagerank: saved state: slice position out of range");
      double scalars[4];
      base64_decode_into(j.at("scalars").get<std::string>(), scalars, sizeof scalars, "scalars");
      base64_decode_into(j.at("rank").get<std::string>(), rank_, n_ * sizeof(double), "rank");
      base64_decode_into(j.at("contrib").get<std::string>(), contrib_, n_ * sizeof(double), "contrib");
      iteration_ = j.at("iteration").get<std::int64_t>();
      v_ = v;
      e_ = e;
      finished_ = j.at("finished").get<bool>();
      converged_ = j.at("converged").get<bool>();
      residual_ = j.at("residual").get<double>();
      edges_processed_ = j.at("edges_processed").get<std::uint64_t>();
      acc_ = scalars[0];
      dangling_ = scalars[1];
      next_dangling_ = scalars[2];
      residual_acc_ = scalars[3];
    } catch (const nlohmann::json::exception& ex) {
      throw LaneError(std::string("pagerank: cannot load saved state: ") + ex.what());
    }
    // The next-iteration contributions of the vertices already finalized follow from rank_.
    for (std::uint64_t u = 0; u < v_ && u < n_; ++u)
      next_contrib_[u] = outdeg_[u] == 0 ? 0.0 : rank_[u] / outdeg_[u];
    if (finished_) write_top_k();  // the output directory may be a new one
  }

  nlohmann::json report() const override {
    nlohmann::json j;
    j["source"] = graph_path_.empty() ? "rmat scale " + std::to_string(scale_) + " edge_factor " +
                                            std::to_string(edge_factor_) + " seed " + std::to_string(seed_)
                                      : graph_path_;
    j["vertices"] = n_;
    j["edges"] = m_;
    j["dangling_vertices"] = dangling_count_;
    j["iterations"] = iteration_;
    j["converged"] = converged_;
    j["residual"] = residual_;
    j["finished"] = finished_;
    j["edges_processed"] = edges_processed_;
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [vertex, score] : top_k()) top.push_back({{"vertex", vertex}, {"score", score}});
    j["top"] = top;
    if (finished_) j["top_k_file"] = output_dir_ + "/top_k.txt";
    return j;
  }

 private:
  // Calls emit(src, dst) for every edge of the configured source.
  void for_each_edge(const std::function<void(std::uint32_t, std::uint32_t)>& emit) const {
    if (graph_path_.empty()) for_each_rmat_edge(scale_, edge_factor_, seed_, emit);
    else read_edge_list(graph_path_, emit);
  }

  void build_graph(Arena& arena) {
    // Pass 1: vertex and edge counts (and file validation).
    std::uint64_t max_id = 0, m = 0;
    if (graph_path_.empty()) {
      max_id = (std::uint64_t{1} << scale_) - 1;
      m = static_cast<std::uint64_t>(edge_factor_) << scale_;
    } else {
      read_edge_list(graph_path_, [&](std::uint32_t s, std::uint32_t d) {
        max_id = std::max<std::uint64_t>(max_id, std::max(s, d));
        ++m;
      });
      if (m == 0) throw LaneError("pagerank: graph '" + graph_path_ + "' has no edges");
    }
    n_ = max_id + 1;
    m_ = m;
    off_ = arena.allocate_n<std::uint64_t>(n_ + 1, "pagerank in-edge offsets");
    outdeg_ = arena.allocate_n<std::uint32_t>(n_, "pagerank out-degrees");
    src_ = arena.allocate_n<std::uint32_t>(m_, "pagerank in-edge sources");
    rank_ = arena.allocate_n<double>(n_, "pagerank ranks");
    contrib_ = arena.allocate_n<double>(n_, "pagerank contributions");
    next_contrib_ = arena.allocate_n<double>(n_, "pagerank next contributions");
    // Pass 2: degrees. Pass 3: stable counting sort of the edges by destination.
    std::uint64_t seen = 0;
    for_each_edge([&](std::uint32_t s, std::uint32_t d) {
      if (s >= n_ || d >= n_ || seen >= m_) { ++seen; return; }
      ++off_[d + 1];
      ++outdeg_[s];
      ++seen;
    });
    if (seen != m_) throw LaneError("pagerank: graph '" + graph_path_ + "' changed while it was read");
    for (std::uint64_t v = 0; v < n_; ++v) off_[v + 1] += off_[v];
    for_each_edge([&](std::uint32_t s, std::uint32_t d) {
      if (s < n_ && d < n_ && off_[d] < off_[d + 1]) src_[off_[d]++] = s;  // guards a changed file
    });
    for (std::uint64_t v = n_; v > 0; --v) off_[v] = off_[v - 1];
    off_[0] = 0;
    dangling_count_ = 0;
    for (std::uint64_t v = 0; v < n_; ++v) dangling_count_ += outdeg_[v] == 0;
  }

  void start() {
    const double r0 = 1.0 / static_cast<double>(n_);
    dangling_ = 0.0;
    for (std::uint64_t v = 0; v < n_; ++v) {
      rank_[v] = r0;
      if (outdeg_[v] == 0) dangling_ += r0;
      contrib_[v] = outdeg_[v] == 0 ? 0.0 : r0 / outdeg_[v];
    }
    iteration_ = 0;
    v_ = 0;
    e_ = 0;
    acc_ = next_dangling_ = residual_acc_ = 0.0;
    residual_ = 0.0;
    finished_ = converged_ = false;
  }

  void end_iteration() {
    ++iteration_;
    residual_ = residual_acc_;
    std::swap(contrib_, next_contrib_);
    dangling_ = next_dangling_;
    v_ = 0;
    e_ = 0;
    acc_ = next_dangling_ = residual_acc_ = 0.0;
    converged_ = residual_ < tolerance_;
    if (converged_ || iteration_ >= max_iterations_) {
      finished_ = true;
      write_top_k();
    }
  }

  std::vector<std::pair<std::uint64_t, double>> top_k() const {
    // Highest score first, ties by lower vertex id; a heap of k entries, not a sort of N.
    using Entry = std::pair<double, std::uint64_t>;
    auto better = [](const Entry& a, const Entry& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    std::priority_queue<Entry, std::vector<Entry>, decltype(better)> heap(better);  // top = worst
    const auto k = static_cast<std::size_t>(top_k_);
    for (std::uint64_t v = 0; v < n_ && k > 0; ++v) {
      const Entry e{rank_[v], v};
      if (heap.size() < k) heap.push(e);
      else if (better(e, heap.top())) { heap.pop(); heap.push(e); }
    }
    std::vector<std::pair<std::uint64_t, double>> out;
    while (!heap.empty()) { out.emplace_back(heap.top().second, heap.top().first); heap.pop(); }
    std::reverse(out.begin(), out.end());
    return out;
  }

  void write_top_k() const {
    const std::string path = output_dir_ + "/top_k.txt";
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) throw LaneError("pagerank: cannot write '" + path + "': " + std::strerror(errno));
    std::fprintf(f, "# vertex score (pagerank, %llu vertices, %llu edges, %lld iterations, %s, L1 residual %.3e)\n",
                 static_cast<unsigned long long>(n_), static_cast<unsigned long long>(m_),
                 static_cast<long long>(iteration_), converged_ ? "converged" : "not converged", residual_);
    for (const auto& [v, s] : top_k())
      std::fprintf(f, "%llu %.17g\n", static_cast<unsigned long long>(v), s);
    if (std::fclose(f) != 0) throw LaneError("pagerank: error writing '" + path + "'");
  }

  // options
  std::string graph_path_, generate_, output_dir_;
  int scale_ = 16;
  std::int64_t edge_factor_ = 16;
  std::uint64_t seed_ = 1;
  double damping_ = 0.85, tolerance_ = 1e-8;
  std::int64_t max_iterations_ = 100, slice_edges_ = 1 << 21, top_k_ = 10;
  // graph (arena)
  std::uint64_t n_ = 0, m_ = 0, dangling_count_ = 0;
  std::uint64_t* off_ = nullptr;
  std::uint32_t* outdeg_ = nullptr;
  std::uint32_t* src_ = nullptr;
  double* rank_ = nullptr;
  double* contrib_ = nullptr;       // r[u]/outdeg(u) of the current iteration (0 for dangling)
  double* next_contrib_ = nullptr;  // the same for the next one, filled as vertices finalize
  // progress
  std::int64_t iteration_ = 0;
  std::uint64_t v_ = 0, e_ = 0, edges_processed_ = 0;
  double acc_ = 0, dangling_ = 0, next_dangling_ = 0, residual_acc_ = 0, residual_ = 0;
  bool finished_ = false, converged_ = false;
};

}  // namespace

std::unique_ptr<Lane> make_pagerank_lane() { return std::make_unique<PageRankLane>(); }

}  // namespace pipelane
