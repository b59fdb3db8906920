#include "lanes/builtin/graphsgd_lane.h"

#include "lanes/builtin/graphsgd_lane_device.h"
#include "runtime/graphsgd_edges.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lanes/builtin/graph/csr.h"
#include "lanes/builtin/graph/edge_source.h"
#include "lanes/builtin/state_bytes.h"

namespace pipelane {
namespace {

std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr std::uint32_t kStateVersion = 1;
constexpr std::uint32_t kMaxRmseHistory = 1000;  // the report lists at most this many iterations
// A device runs a slice as one warp, one edge after another (each a chain of dependent loads):
// a smaller default slice than the host loop's. An estimate (~1 us per edge), not a measurement.
constexpr std::int64_t kDeviceSliceEdges = 4096;

enum class Pass : std::uint32_t { Update = 0, Rmse = 1 };

class GraphSgdLane final : public Lane {
 public:
  std::string name() const override { return "graphsgd"; }
  std::string work_unit() const override { return "edges"; }
  // With step = backend (auto on a device backend) it touches its arena only through the
  // backend's copies and Backend::graphsgd_step; on the CPU backend the host step reads its arena.
  bool runs_on_device() const override { return true; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    source_ = read_edge_source(o);
    k_ = static_cast<int>(o.get_int("latent_dim", 16, 1, 1024));
    step_ = static_cast<float>(o.get_double("learning_rate", 0.005, 1e-12, 1.0));
    lambda_ = static_cast<float>(o.get_double("lambda", 0.05, 0.0, 10.0));
    iterations_ = o.get_int("iterations", 10, 1, 100'000'000);
    tolerance_ = o.get_double("tolerance", 0.0, 0.0, 1e9);
    const bool device_backend = ctx.backend.kind() != DeviceKind::Cpu;
    slice_edges_ = o.get_int("slice_edges", device_backend ? kDeviceSliceEdges : 32768, 1, std::int64_t{1} << 40);
    init_seed_ = static_cast<std::uint64_t>(o.get_int("init_seed", 1, 0, INT64_MAX));
    const std::string step = o.get_string("step", "auto");
    o.reject_unknown();
    if (step != "auto" && step != "host" && step != "backend")
      throw LaneError(o.source() + ": [lane.graphsgd] step = '" + step + "': expected auto, host or backend");
    if (step == "host" && device_backend)
      throw LaneError(o.source() + ": [lane.graphsgd] step = host: the host step reads its arena, which is device "
                                   "memory on a device backend (use auto or backend)");
    const bool backend_step = step == "backend" || (step == "auto" && device_backend);
    try {
      if (backend_step) return build_backend(ctx);
      build(ctx.arena);
    } catch (const ArenaQuotaError& e) {
      throw LaneError(std::string("graphsgd: graph and latent vectors do not fit the lane's memory quota: ") +
                      e.what());
    }
  }

  double step(LaneContext&) override {
    if (device_) return static_cast<double>(device_->step());
    if (finished_) return 0.0;
    std::int64_t budget = slice_edges_;
    std::uint64_t visited = 0;
    while (budget > 0 && !finished_) {
      if (row_ == g_.vertices) {
        end_pass();
        continue;
      }
      const std::uint64_t row_end = g_.offsets[row_ + 1];
      const std::uint64_t take = std::min<std::uint64_t>(row_end - edge_, static_cast<std::uint64_t>(budget));
      if (pass_ == Pass::Update) update_edges(take);
      else measure_edges(take);
      edge_ += take;
      visited += take;
      budget -= static_cast<std::int64_t>(take);
      if (edge_ == row_end) {
        ++row_;
        --budget;  // a row passed is a unit of work too (rows without edges cost their visit)
      }
    }
    edges_visited_ += visited;
    return static_cast<double>(visited);
  }

  bool finished() const override { return device_ ? device_->finished() : finished_; }

  void teardown(LaneContext&) override {
    if (device_) device_->sync();  // training is over: waiting for the lane stream costs it nothing
  }

  // Both steps save the same state (the backend step's position is the host loop's), so a state
  // resumes in either.
  std::string save() const override {
    if (device_) take_snapshot();
    StateWriter w;
    w.put(kStateVersion);
    w.put(g_.vertices);
    w.put(g_.edges);
    w.put(static_cast<std::int32_t>(k_));
    w.put(static_cast<std::uint32_t>(pass_));
    w.put(row_);
    w.put(edge_);
    w.put(iteration_);
    w.put(squared_error_);
    w.put(edges_visited_);
    w.put(static_cast<std::uint8_t>(finished_));
    w.put(static_cast<std::uint64_t>(rmse_.size()));
    w.bytes(rmse_.data(), rmse_.size() * sizeof(double));
    const std::size_t floats = static_cast<std::size_t>(g_.vertices) * static_cast<std::size_t>(k_);
    w.bytes(user_, floats * sizeof(float));
    w.bytes(item_, floats * sizeof(float));
    return w.take();
  }

  void load(const std::string& state) override {
    if (device_) {  // the state's vectors go to the device through these
      const std::size_t floats = static_cast<std::size_t>(g_.vertices) * static_cast<std::size_t>(k_);
      snapshot_user_.assign(floats, 0.0f);
      snapshot_item_.assign(floats, 0.0f);
      user_ = snapshot_user_.data();
      item_ = snapshot_item_.data();
    }
    load_host(state);
    if (device_) restore_snapshot();
  }

  // The host step's state into the members (on a device run: its vectors into the snapshot buffers).
  void load_host(const std::string& state) {
    StateReader r(state, "graphsgd");
    if (r.get<std::uint32_t>() != kStateVersion) throw LaneError("graphsgd: saved state has another version");
    const auto n = r.get<std::uint64_t>();
    const auto m = r.get<std::uint64_t>();
    const auto k = r.get<std::int32_t>();
    if (n != g_.vertices || m != g_.edges || k != k_)
      throw LaneError("graphsgd: saved state is for " + std::to_string(n) + " vertices / " + std::to_string(m) +
                      " edges / latent_dim " + std::to_string(k) + ", this run has " + std::to_string(g_.vertices) +
                      " / " + std::to_string(g_.edges) + " / " + std::to_string(k_));
    const auto pass = r.get<std::uint32_t>();
    const auto row = r.get<std::uint64_t>();
    const auto edge = r.get<std::uint64_t>();
    if (pass > 1 || row > n || (row < n && (edge < offset(row) || edge > offset(row + 1))) || (row == n && edge != m))
      throw LaneError("graphsgd: saved state: pass position out of range");
    pass_ = static_cast<Pass>(pass);
    row_ = row;
    edge_ = edge;
    iteration_ = r.get<std::int64_t>();
    squared_error_ = r.get<double>();
    edges_visited_ = r.get<std::uint64_t>();
    finished_ = r.get<std::uint8_t>() != 0;
    const auto history = r.get<std::uint64_t>();
    if (history > kMaxRmseHistory) throw LaneError("graphsgd: saved state: RMSE history too long");
    rmse_.resize(history);
    r.bytes(rmse_.data(), history * sizeof(double));
    const std::size_t floats = static_cast<std::size_t>(n) * static_cast<std::size_t>(k_);
    r.bytes(user_, floats * sizeof(float));
    r.bytes(item_, floats * sizeof(float));
    if (!r.at_end()) throw LaneError("graphsgd: saved state has trailing bytes");
  }

  nlohmann::json report() const override {
    if (device_) take_snapshot();  // summary time: the state as the device has it
    nlohmann::json j;
    j["source"] = source_.describe();
    j["vertices"] = g_.vertices;
    j["edges"] = g_.edges;
    j["ratings"] = g_.weighted_edges ? "the file's third column" : "hashed 1..5 per edge (unweighted graph)";
    j["latent_dim"] = k_;
    j["learning_rate"] = step_;
    j["lambda"] = lambda_;
    j["iterations"] = iteration_;
    j["rmse"] = rmse_;  // after each iteration (at most the first kMaxRmseHistory)
    if (!rmse_.empty()) j["last_rmse"] = last_rmse_;
    j["edges_visited"] = edges_visited_;
    j["finished"] = finished_;
    j["step"] = device_ ? "Backend::graphsgd_step on " + backend_name_ + " (one warp, serial)"
                        : std::string("host loop (cpu)");
    return j;
  }

 private:
  void build(Arena& arena) {
    const CsrAllocate allocate = [&arena](std::size_t bytes, const char* what) { return arena.allocate(bytes, what); };
    g_ = build_csr(source_, CsrLayout{CsrRows::BySource, false, true, false}, allocate);
    fill_ratings(g_);
    const std::size_t floats = static_cast<std::size_t>(g_.vertices) * static_cast<std::size_t>(k_);
    user_ = arena.allocate_n<float>(floats, "graphsgd user vectors");
    item_ = arena.allocate_n<float>(floats, "graphsgd item vectors");
    for (std::uint64_t v = 0; v < g_.vertices; ++v)
      for (int k = 0; k < k_; ++k) {
        user_[v * k_ + k] = graphsgd_initial_latent(init_seed_, false, v, k, k_);
        item_[v * k_ + k] = graphsgd_initial_latent(init_seed_, true, v, k, k_);
      }
  }

  // The backend step: CSR, ratings and initial vectors in host memory, uploaded into the arena by
  // GraphSgdDeviceRun and dropped; the host keeps only the row offsets (for load()'s checks).
  void build_backend(LaneContext& ctx) {
    HostCsrMemory host;
    Csr g = build_csr(source_, CsrLayout{CsrRows::BySource, false, true, false}, host.allocator());
    fill_ratings(g);
    if (g.vertices > 0xFFFFFFFFull) throw LaneError("graphsgd: the backend step takes at most 2^32 - 1 vertices");
    const std::size_t floats = static_cast<std::size_t>(g.vertices) * static_cast<std::size_t>(k_);
    std::vector<float> user(floats), item(floats);
    for (std::uint64_t v = 0; v < g.vertices; ++v)
      for (int k = 0; k < k_; ++k) {
        user[v * k_ + k] = graphsgd_initial_latent(init_seed_, false, v, k, k_);
        item[v * k_ + k] = graphsgd_initial_latent(init_seed_, true, v, k, k_);
      }
    device_ = std::make_unique<GraphSgdDeviceRun>(
        ctx, GraphSgdHostGraph{g.offsets, g.neighbors, g.weights, g.vertices, g.edges},
        GraphSgdConfig{k_, step_, lambda_, iterations_, tolerance_, slice_edges_, kMaxRmseHistory}, user.data(),
        item.data());
    host_offsets_.assign(g.offsets, g.offsets + g.vertices + 1);
    g_.vertices = g.vertices;
    g_.edges = g.edges;
    g_.weighted_edges = g.weighted_edges;
    backend_name_ = ctx.backend.name();
  }

  std::uint64_t offset(std::uint64_t row) const { return device_ ? host_offsets_[row] : g_.offsets[row]; }

  // The device's state as the host step keeps it: save() and report() read these members.
  void take_snapshot() const {
    GraphSgdDeviceRun::Snapshot s = device_->snapshot();
    auto& self = const_cast<GraphSgdLane&>(*this);  // a cache of the device's state, nothing else
    self.pass_ = static_cast<Pass>(s.at.pass);
    self.row_ = s.at.row;
    self.edge_ = s.at.edge;
    self.iteration_ = s.state.iterations;
    self.squared_error_ = s.state.squared_error;
    self.edges_visited_ = s.state.edges;
    self.finished_ = s.state.done != 0;
    self.rmse_ = std::move(s.rmse);
    self.last_rmse_ = s.state.rmse;
    self.snapshot_user_ = std::move(s.user);
    self.snapshot_item_ = std::move(s.item);
    self.user_ = self.snapshot_user_.data();
    self.item_ = self.snapshot_item_.data();
  }

  // After load_host() read a state into the members (vectors into the snapshot buffers).
  void restore_snapshot() {
    GraphSgdDeviceRun::Snapshot s;
    s.at = GraphSgdDeviceRun::Position{static_cast<std::uint32_t>(pass_), row_, edge_};
    s.state.squared_error = squared_error_;
    s.state.rmse = last_rmse_;
    s.state.edges = edges_visited_;
    s.state.iterations = iteration_;
    s.state.done = finished_ ? 1u : 0u;
    s.rmse = rmse_;
    s.user = snapshot_user_;
    s.item = snapshot_item_;
    device_->restore(std::move(s));
  }

  void fill_ratings(Csr& g) const {
    if (g.weighted_edges != 0 && g.weighted_edges != g.source_edges)
      throw LaneError("graphsgd: graph '" + source_.describe() + "': " + std::to_string(g.weighted_edges) + " of " +
                      std::to_string(g.source_edges) + " edges have a rating (third column): expected all or none");
    if (g.weighted_edges == 0)
      for (std::uint64_t u = 0; u < g.vertices; ++u)
        for (std::uint64_t e = g.offsets[u]; e < g.offsets[u + 1]; ++e)
          g.weights[e] = graphsgd_hashed_rating(static_cast<std::uint32_t>(u), g.neighbors[e]);
  }

  // Edges [edge_, edge_ + count) of row row_, in order (the CPU backend's graphsgd_step: its bits).
  void update_edges(std::uint64_t count) {
    graphsgd_edges::graphsgd_update_edges(user_ + row_ * k_, item_, g_.neighbors, g_.weights, edge_, edge_ + count, k_, step_,
                               lambda_);
  }

  void measure_edges(std::uint64_t count) {
    squared_error_ = graphsgd_edges::graphsgd_measure_edges(user_ + row_ * k_, item_, g_.neighbors, g_.weights, edge_,
                                                 edge_ + count, k_, squared_error_);
  }

  void end_pass() {
    row_ = 0;
    edge_ = 0;
    if (pass_ == Pass::Update) {
      pass_ = Pass::Rmse;
      squared_error_ = 0.0;
      return;
    }
    pass_ = Pass::Update;
    ++iteration_;
    last_rmse_ = std::sqrt(squared_error_ / static_cast<double>(g_.edges));
    if (rmse_.size() < kMaxRmseHistory) rmse_.push_back(last_rmse_);
    if (iteration_ >= iterations_ || last_rmse_ < tolerance_) finished_ = true;
  }

  // options
  EdgeSource source_;
  int k_ = 16;
  float step_ = 0.005f, lambda_ = 0.05f;
  std::int64_t iterations_ = 10, slice_edges_ = 32768;
  double tolerance_ = 0.0;
  std::uint64_t init_seed_ = 1;
  // the graph (ratings in g_.weights) and the latent vectors, in the arena
  Csr g_;
  float* user_ = nullptr;
  float* item_ = nullptr;
  // progress
  Pass pass_ = Pass::Update;
  std::uint64_t row_ = 0, edge_ = 0, edges_visited_ = 0;
  std::int64_t iteration_ = 0;
  double squared_error_ = 0.0, last_rmse_ = 0.0;
  std::vector<double> rmse_;
  bool finished_ = false;
  // the step through the backend (step = backend, or auto on a device backend)
  std::unique_ptr<GraphSgdDeviceRun> device_;
  std::string backend_name_;
  std::vector<std::uint64_t> host_offsets_;
  std::vector<float> snapshot_user_, snapshot_item_;  // the device's vectors, for save() and load()
};

}  // namespace

float graphsgd_hashed_rating(std::uint32_t u, std::uint32_t v) {
  const std::uint64_t h = mix64((static_cast<std::uint64_t>(u) << 32 | v) + 0x9E3779B97F4A7C15ull);
  return static_cast<float>(1 + h % 5);
}

float graphsgd_initial_latent(std::uint64_t init_seed, bool item, std::uint64_t v, int k, int latent_dim) {
  const std::uint64_t h = mix64(mix64(init_seed * 2 + (item ? 1 : 0)) ^ mix64(v * 1024 + static_cast<std::uint64_t>(k)));
  const float unit = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
  return unit / std::sqrt(static_cast<float>(latent_dim));
}

std::unique_ptr<Lane> make_graphsgd_lane() { return std::make_unique<GraphSgdLane>(); }

}  // namespace pipelane
