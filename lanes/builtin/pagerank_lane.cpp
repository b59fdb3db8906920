#include "lanes/builtin/pagerank_lane.h"

#include "lanes/builtin/graph/csr.h"
#include "lanes/builtin/graph/edge_source.h"
#include "lanes/builtin/pagerank_lane_device.h"

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

class PageRankLane final : public Lane {
 public:
  std::string name() const override { return "pagerank"; }
  std::string work_unit() const override { return "edges"; }
  // Its fp32 step touches the arena only through the backend's copies and Backend::pagerank_step.
  // On the CPU backend the default fp64 step dereferences its (host) arena, as it always did.
  bool runs_on_device() const override { return true; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    source_ = read_edge_source(o);
    damping_ = o.get_double("damping", 0.85, 0.0, 1.0);
    tolerance_ = o.get_double("tolerance", 1e-8, 0.0, 1e9);
    max_iterations_ = o.get_int("max_iterations", 100, 1, 100000000);
    slice_edges_ = o.get_int("slice_edges", 1 << 21, 1, INT64_MAX);
    top_k_ = o.get_int("top_k", 10, 0, 100000000);
    const std::string precision = o.get_string("precision", "auto");
    o.reject_unknown();
    const bool device_backend = ctx.backend.kind() != DeviceKind::Cpu;
    if (precision != "auto" && precision != "fp64" && precision != "fp32")
      throw LaneError(o.source() + ": [lane.pagerank] precision = '" + precision + "': expected auto, fp64 or fp32");
    if (precision == "fp64" && device_backend)
      throw LaneError(o.source() + ": [lane.pagerank] precision = fp64: the device step is fp32 (use auto or fp32)");
    fp32_ = precision == "fp32" || (precision == "auto" && device_backend);
    output_dir_ = ctx.output_dir;

    try {
      build_graph(ctx);
    } catch (const ArenaQuotaError& e) {
      throw LaneError(std::string("pagerank: graph does not fit the lane's memory quota: ") + e.what());
    }
    if (!fp32_) start();
  }

  double step(LaneContext&) override {
    if (device_) return static_cast<double>(device_->step());
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

  bool finished() const override { return device_ ? device_->finished() : finished_; }

  void teardown(LaneContext&) override {
    if (!device_) return;
    device_->sync();  // training is over: waiting for the lane stream costs it nothing
    if (device_->finished()) write_top_k();
  }

  std::string save() const override {
    if (device_) return save_fp32();
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
      if (j.value("precision", std::string("fp64")) != (device_ ? "fp32" : "fp64"))
        throw LaneError(std::string("pagerank: saved state is from the ") + j.value("precision", std::string("fp64")) +
                        " step, this run uses the " + (device_ ? "fp32" : "fp64") + " one ([lane.pagerank] precision)");
      if (device_) return load_fp32(j);
      check_saved_graph(j);
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
    if (device_) device_->sync();  // summary time: the state as the device has it
    nlohmann::json j;
    j["source"] = source_.describe();
    j["vertices"] = n_;
    j["edges"] = m_;
    j["dangling_vertices"] = dangling_count_;
    j["precision"] = device_ ? "fp32" : "fp64";
    j["step"] = device_ ? "Backend::pagerank_step on " + backend_name_ : std::string("host loop (cpu)");
    j["iterations"] = iterations();
    j["converged"] = converged();
    j["residual"] = residual();
    j["finished"] = finished();
    j["edges_processed"] = device_ ? device_->state().edges : edges_processed_;
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [vertex, score] : top_k()) top.push_back({{"vertex", vertex}, {"score", score}});
    j["top"] = top;
    if (finished()) j["top_k_file"] = output_dir_ + "/top_k.txt";
    return j;
  }

 private:
  // The fp64 step builds the CSR in its arena (host memory) and keeps it there; the fp32 step
  // builds it in host memory, which PagerankDeviceRun uploads into the arena and which goes after.
  // Pull over in-edges: rows by destination, the sources' out-degrees beside.
  void build_graph(LaneContext& ctx) {
    Arena& arena = ctx.arena;
    HostCsrMemory host;
    const CsrAllocate allocate = fp32_ ? host.allocator()
                                       : CsrAllocate([&arena](std::size_t bytes, const char* what) {
                                           return arena.allocate(bytes, what);
                                         });
    const Csr g = build_csr(source_, CsrLayout{CsrRows::ByDestination, true, false, false}, allocate);
    n_ = g.vertices;
    m_ = g.edges;
    off_ = g.offsets;
    outdeg_ = g.other_degree;
    src_ = g.neighbors;
    if (!fp32_) {
      rank_ = arena.allocate_n<double>(n_, "pagerank ranks");
      contrib_ = arena.allocate_n<double>(n_, "pagerank contributions");
      next_contrib_ = arena.allocate_n<double>(n_, "pagerank next contributions");
    }
    dangling_count_ = 0;
    for (std::uint64_t v = 0; v < n_; ++v) dangling_count_ += outdeg_[v] == 0;
    if (fp32_) {
      device_ = std::make_unique<PagerankDeviceRun>(ctx, PagerankHostCsr{off_, src_, outdeg_, n_, m_},
                                                    static_cast<float>(damping_), tolerance_, max_iterations_,
                                                    slice_edges_);
      off_ = nullptr;  // the host copy goes now
      outdeg_ = src_ = nullptr;
      backend_name_ = ctx.backend.name();
    }
  }

  std::int64_t iterations() const { return device_ ? device_->state().iterations : iteration_; }
  double residual() const { return device_ ? device_->state().residual : residual_; }
  bool converged() const {
    return device_ ? device_->state().done != 0 && device_->state().residual < tolerance_ : converged_;
  }

  // The fp32 run's state: the device's (waited for), raw bytes where they must resume bit-exactly.
  std::string save_fp32() const {
    const PagerankDeviceRun::Snapshot snap = device_->snapshot();
    nlohmann::json j;
    j["precision"] = "fp32";
    j["vertices"] = n_;
    j["edges"] = m_;
    j["vertex"] = snap.vertex;
    j["state"] = base64_encode(&snap.state, sizeof snap.state);
    for (int k = 0; k < 2; ++k) {
      j["rank"].push_back(base64_encode(snap.rank[k].data(), n_ * sizeof(float)));
      j["contrib"].push_back(base64_encode(snap.contrib[k].data(), n_ * sizeof(float)));
    }
    return j.dump();
  }

  void load_fp32(const nlohmann::json& j) {
    check_saved_graph(j);
    PagerankDeviceRun::Snapshot snap;
    snap.vertex = j.at("vertex").get<std::uint32_t>();
    base64_decode_into(j.at("state").get<std::string>(), &snap.state, sizeof snap.state, "state");
    for (int k = 0; k < 2; ++k) {
      snap.rank[k].resize(n_);
      snap.contrib[k].resize(n_);
      base64_decode_into(j.at("rank").at(k).get<std::string>(), snap.rank[k].data(), n_ * sizeof(float), "rank");
      base64_decode_into(j.at("contrib").at(k).get<std::string>(), snap.contrib[k].data(), n_ * sizeof(float),
                         "contrib");
    }
    device_->restore(snap);
  }

  void check_saved_graph(const nlohmann::json& j) const {
    if (j.at("vertices").get<std::uint64_t>() != n_ || j.at("edges").get<std::uint64_t>() != m_)
      throw LaneError("pagerank: saved state is for a graph of " + std::to_string(j.at("vertices").get<std::uint64_t>()) +
                      " vertices / " + std::to_string(j.at("edges").get<std::uint64_t>()) + " edges, this one has " +
                      std::to_string(n_) + " / " + std::to_string(m_));
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
    const std::vector<float> fp32 = device_ && k > 0 ? device_->ranks() : std::vector<float>();
    for (std::uint64_t v = 0; v < n_ && k > 0; ++v) {
      const Entry e{device_ ? static_cast<double>(fp32[v]) : rank_[v], v};
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
                 static_cast<long long>(iterations()), converged() ? "converged" : "not converged", residual());
    for (const auto& [v, s] : top_k())
      std::fprintf(f, "%llu %.17g\n", static_cast<unsigned long long>(v), s);
    if (std::fclose(f) != 0) throw LaneError("pagerank: error writing '" + path + "'");
  }

  // options
  EdgeSource source_;
  std::string output_dir_;
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
  // the fp32 step through the backend (precision fp32, or auto on a device backend)
  bool fp32_ = false;
  std::unique_ptr<PagerankDeviceRun> device_;
  std::string backend_name_;
  // progress of the fp64 step
  std::int64_t iteration_ = 0;
  std::uint64_t v_ = 0, e_ = 0, edges_processed_ = 0;
  double acc_ = 0, dangling_ = 0, next_dangling_ = 0, residual_acc_ = 0, residual_ = 0;
  bool finished_ = false, converged_ = false;
};

}  // namespace

std::unique_ptr<Lane> make_pagerank_lane() { return std::make_unique<PageRankLane>(); }

}  // namespace pipelane
