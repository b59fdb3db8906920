#include "lanes/builtin/bfs_lane.h"

#include "lanes/builtin/bfs_lane_device.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lanes/builtin/graph/csr.h"
#include "lanes/builtin/graph/edge_source.h"
#include "lanes/builtin/state_bytes.h"

namespace pipelane {
namespace {

constexpr std::uint32_t kHostStateVersion = 1;    // the host (push) step's state
constexpr std::uint32_t kDeviceStateVersion = 2;  // Backend::bfs_step's (pull)
constexpr std::size_t kMaxReportedTraversals = 100;

// One traversal's outcome, as the report lists it.
struct TraversalResult {
  std::uint64_t source = 0, reached = 0, edges_scanned = 0;
  std::vector<std::uint64_t> level_sizes;  // vertices at depth 0, 1, ...
};

class BfsLane final : public Lane {
 public:
  std::string name() const override { return "bfs"; }
  std::string work_unit() const override { return "edges"; }
  // With step = backend (auto on a device backend) it touches its arena only through the
  // backend's copies and Backend::bfs_step; on the CPU backend the host step reads its arena.
  bool runs_on_device() const override { return true; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    source_ = read_edge_source(o);
    undirected_ = o.get_bool("undirected", false);
    first_source_ = static_cast<std::uint64_t>(o.get_int("source", 0, 0, 0xFFFFFFFEll));
    traversals_ = o.get_int("traversals", 1, 1, 1'000'000'000);
    slice_edges_ = o.get_int("slice_edges", 1 << 20, 1, std::int64_t{1} << 40);
    write_depths_ = o.get_bool("write_depths", false);
    const std::string step = o.get_string("step", "auto");
    o.reject_unknown();
    const bool device_backend = ctx.backend.kind() != DeviceKind::Cpu;
    if (step != "auto" && step != "host" && step != "backend")
      throw LaneError(o.source() + ": [lane.bfs] step = '" + step + "': expected auto, host or backend");
    if (step == "host" && device_backend)
      throw LaneError(o.source() + ": [lane.bfs] step = host: the host step reads its arena, which is device "
                                   "memory on a device backend (use auto or backend)");
    output_dir_ = ctx.output_dir;
    if (step == "backend" || (step == "auto" && device_backend)) return setup_backend(ctx, o);
    Arena& arena = ctx.arena;
    try {
      const CsrAllocate allocate = [&arena](std::size_t bytes, const char* what) { return arena.allocate(bytes, what); };
      g_ = build_csr(source_, CsrLayout{CsrRows::BySource, false, false, undirected_}, allocate);
      if (first_source_ >= g_.vertices)
        throw LaneError(o.source() + ": [lane.bfs] source = " + std::to_string(first_source_) +
                        ": the graph has vertices 0.." + std::to_string(g_.vertices - 1));
      depth_ = arena.allocate_n<std::int32_t>(g_.vertices, "bfs depths");
      mark_ = arena.allocate_n<std::uint32_t>(g_.vertices, "bfs visited marks");
      frontier_ = arena.allocate_n<std::uint32_t>(g_.vertices, "bfs frontier");
      next_ = arena.allocate_n<std::uint32_t>(g_.vertices, "bfs next frontier");
    } catch (const ArenaQuotaError& e) {
      throw LaneError(std::string("bfs: graph does not fit the lane's memory quota: ") + e.what());
    }
    start_traversal();
  }

  double step(LaneContext&) override {
    if (device_) return static_cast<double>(device_->step());
    if (finished()) return 0.0;
    std::int64_t budget = slice_edges_;
    std::uint64_t scanned = 0;
    while (budget > 0 && !finished()) {
      if (position_ == frontier_size_) {
        end_level();
        continue;
      }
      const std::uint32_t mark = current_mark();  // read here: a traversal can end inside a step
      const std::uint32_t u = frontier_[position_];
      const std::uint64_t row_end = g_.offsets[u + 1];
      if (edge_ < g_.offsets[u]) edge_ = g_.offsets[u];  // entering u's row
      const std::uint64_t take = std::min<std::uint64_t>(row_end - edge_, static_cast<std::uint64_t>(budget));
      for (std::uint64_t e = edge_; e < edge_ + take; ++e) {
        const std::uint32_t v = g_.neighbors[e];
        if (mark_[v] == mark) continue;
        mark_[v] = mark;
        depth_[v] = level_ + 1;
        next_[next_size_++] = v;
      }
      edge_ += take;
      scanned += take;
      current_.edges_scanned += take;  // per row: the traversal may end later in this step
      budget -= static_cast<std::int64_t>(take);
      if (edge_ == row_end) {
        ++position_;
        edge_ = 0;
        --budget;  // a frontier vertex is a unit of work too (one without edges costs its visit)
      }
    }
    edges_scanned_ += scanned;
    return static_cast<double>(scanned);
  }

  bool finished() const override { return device_ ? device_->finished() : traversal_ >= traversals_; }

  void teardown(LaneContext&) override {
    if (!device_) return;
    device_->sync();  // training is over: waiting for the lane stream costs it nothing
    if (device_->finished() && write_depths_) write_device_depths();
  }

  std::string save() const override;
  void load(const std::string& state) override;
  nlohmann::json report() const override;

 private:
  // The pull step through the backend: the in-edge CSR built in host memory, uploaded into the
  // arena by BfsDeviceRun, the host copy dropped.
  void setup_backend(LaneContext& ctx, const LaneOptions& o) {
    HostCsrMemory host;
    const Csr g = build_csr(source_, CsrLayout{CsrRows::ByDestination, false, false, undirected_}, host.allocator());
    if (first_source_ >= g.vertices)
      throw LaneError(o.source() + ": [lane.bfs] source = " + std::to_string(first_source_) +
                      ": the graph has vertices 0.." + std::to_string(g.vertices - 1));
    if (g.vertices > 0x7FFFFFFFull) throw LaneError("bfs: the backend step takes at most 2^31 - 1 vertices");
    g_.vertices = g.vertices;
    g_.edges = g.edges;
    try {
      device_ = std::make_unique<BfsDeviceRun>(
          ctx, BfsHostCsr{g.offsets, g.neighbors, g.vertices, g.edges}, first_source_, traversals_, slice_edges_,
          static_cast<std::uint32_t>(std::min<std::int64_t>(traversals_, kMaxReportedTraversals)));
    } catch (const ArenaQuotaError& e) {
      throw LaneError(std::string("bfs: graph does not fit the lane's memory quota: ") + e.what());
    }
    backend_name_ = ctx.backend.name();
  }

  void write_device_depths() {
    const std::vector<std::int32_t> depth = device_->depths();
    const std::int64_t last = traversals_ - 1;
    write_depth_file(depth.data(), (first_source_ + static_cast<std::uint64_t>(last)) % g_.vertices, last);
  }

  std::string save_device() const;
  void load_device(const std::string& state);
  nlohmann::json report_device() const;

  // Marks are traversal + 1: 0 (the arena's zero fill) is never a traversal's.
  std::uint32_t current_mark() const { return static_cast<std::uint32_t>(traversal_ + 1); }

  void start_traversal() {
    const std::uint64_t s = (first_source_ + static_cast<std::uint64_t>(traversal_)) % g_.vertices;
    current_ = TraversalResult{};
    current_.source = s;
    mark_[s] = current_mark();
    depth_[s] = 0;
    frontier_[0] = static_cast<std::uint32_t>(s);
    frontier_size_ = 1;
    next_size_ = 0;
    position_ = 0;
    edge_ = 0;
    level_ = 0;
  }

  void end_level() {
    current_.level_sizes.push_back(frontier_size_);
    current_.reached += frontier_size_;
    std::swap(frontier_, next_);
    frontier_size_ = next_size_;
    next_size_ = 0;
    position_ = 0;
    edge_ = 0;
    ++level_;
    if (frontier_size_ > 0) return;
    if (write_depths_) write_depths();
    if (done_.size() < kMaxReportedTraversals) done_.push_back(current_);
    ++traversal_;
    if (!finished()) start_traversal();
  }

  void write_depths() const {
    std::vector<std::int32_t> depth(g_.vertices);
    const std::uint32_t mark = current_mark();
    for (std::uint64_t v = 0; v < g_.vertices; ++v) depth[v] = mark_[v] == mark ? depth_[v] : -1;
    write_depth_file(depth.data(), current_.source, traversal_);
  }

  void write_depth_file(const std::int32_t* depth, std::uint64_t source, std::int64_t traversal) const {
    const std::string path = output_dir_ + "/depths.txt";
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) throw LaneError("bfs: cannot write '" + path + "': " + std::strerror(errno));
    std::fprintf(f, "# vertex depth (bfs from %llu, traversal %lld; -1: not reached)\n",
                 static_cast<unsigned long long>(source), static_cast<long long>(traversal));
    for (std::uint64_t v = 0; v < g_.vertices; ++v)
      std::fprintf(f, "%llu %d\n", static_cast<unsigned long long>(v), depth[v]);
    if (std::fclose(f) != 0) throw LaneError("bfs: error writing '" + path + "'");
  }

  // options
  EdgeSource source_;
  bool undirected_ = false, write_depths_ = false;
  std::uint64_t first_source_ = 0;
  std::int64_t traversals_ = 1, slice_edges_ = 1 << 20;
  std::string output_dir_;
  // the graph and the search state, in the arena
  Csr g_;
  std::int32_t* depth_ = nullptr;
  std::uint32_t* mark_ = nullptr;
  std::uint32_t* frontier_ = nullptr;
  std::uint32_t* next_ = nullptr;
  // progress
  std::int64_t traversal_ = 0;
  std::int32_t level_ = 0;
  std::uint64_t frontier_size_ = 0, next_size_ = 0, position_ = 0, edge_ = 0, edges_scanned_ = 0;
  TraversalResult current_;
  std::vector<TraversalResult> done_;
  // the pull step through the backend (step = backend, or auto on a device backend)
  std::unique_ptr<BfsDeviceRun> device_;
  std::string backend_name_;
};

void put_traversal(StateWriter& w, const TraversalResult& t) {
  w.put(t.source);
  w.put(t.reached);
  w.put(t.edges_scanned);
  w.put(static_cast<std::uint64_t>(t.level_sizes.size()));
  w.bytes(t.level_sizes.data(), t.level_sizes.size() * sizeof(std::uint64_t));
}

TraversalResult get_traversal(StateReader& r, std::uint64_t vertices) {
  TraversalResult t;
  t.source = r.get<std::uint64_t>();
  t.reached = r.get<std::uint64_t>();
  t.edges_scanned = r.get<std::uint64_t>();
  const auto levels = r.get<std::uint64_t>();
  if (levels > vertices) throw LaneError("bfs: saved state: more levels than vertices");
  t.level_sizes.resize(levels);
  r.bytes(t.level_sizes.data(), levels * sizeof(std::uint64_t));
  return t;
}

std::string BfsLane::save() const {
  if (device_) return save_device();
  StateWriter w;
  w.put(kHostStateVersion);
  w.put(g_.vertices);
  w.put(g_.edges);
  w.put(traversal_);
  w.put(level_);
  w.put(frontier_size_);
  w.put(next_size_);
  w.put(position_);
  w.put(edge_);
  w.put(edges_scanned_);
  put_traversal(w, current_);
  w.put(static_cast<std::uint64_t>(done_.size()));
  for (const TraversalResult& t : done_) put_traversal(w, t);
  const std::size_t n = static_cast<std::size_t>(g_.vertices);
  w.bytes(depth_, n * sizeof(std::int32_t));
  w.bytes(mark_, n * sizeof(std::uint32_t));
  w.bytes(frontier_, frontier_size_ * sizeof(std::uint32_t));
  w.bytes(next_, next_size_ * sizeof(std::uint32_t));
  return w.take();
}

void BfsLane::load(const std::string& state) {
  if (device_) return load_device(state);
  StateReader r(state, "bfs");
  const auto version = r.get<std::uint32_t>();
  if (version == kDeviceStateVersion)
    throw LaneError("bfs: saved state is from the backend (pull) step, this run uses the host (push) step "
                    "([lane.bfs] step)");
  if (version != kHostStateVersion) throw LaneError("bfs: saved state has another version");
  const auto n = r.get<std::uint64_t>();
  const auto m = r.get<std::uint64_t>();
  if (n != g_.vertices || m != g_.edges)
    throw LaneError("bfs: saved state is for a graph of " + std::to_string(n) + " vertices / " + std::to_string(m) +
                    " edges, this one has " + std::to_string(g_.vertices) + " / " + std::to_string(g_.edges));
  traversal_ = r.get<std::int64_t>();
  level_ = r.get<std::int32_t>();
  frontier_size_ = r.get<std::uint64_t>();
  next_size_ = r.get<std::uint64_t>();
  position_ = r.get<std::uint64_t>();
  edge_ = r.get<std::uint64_t>();
  edges_scanned_ = r.get<std::uint64_t>();
  if (frontier_size_ > n || next_size_ > n || position_ > frontier_size_ || edge_ > m)
    throw LaneError("bfs: saved state: search position out of range");
  current_ = get_traversal(r, n);
  const auto done = r.get<std::uint64_t>();
  if (done > kMaxReportedTraversals) throw LaneError("bfs: saved state: too many traversals");
  done_.clear();
  for (std::uint64_t i = 0; i < done; ++i) done_.push_back(get_traversal(r, n));
  r.bytes(depth_, n * sizeof(std::int32_t));
  r.bytes(mark_, n * sizeof(std::uint32_t));
  r.bytes(frontier_, frontier_size_ * sizeof(std::uint32_t));
  r.bytes(next_, next_size_ * sizeof(std::uint32_t));
  if (!r.at_end()) throw LaneError("bfs: saved state has trailing bytes");
  for (std::uint64_t i = 0; i < frontier_size_ + next_size_; ++i)
    if ((i < frontier_size_ ? frontier_[i] : next_[i - frontier_size_]) >= n)
      throw LaneError("bfs: saved state: a frontier vertex is out of range");
}

nlohmann::json BfsLane::report() const {
  if (device_) return report_device();
  nlohmann::json j;
  j["source"] = source_.describe();
  j["vertices"] = g_.vertices;
  j["edges"] = g_.edges;
  j["undirected"] = undirected_;
  j["traversals_done"] = traversal_;
  j["edges_scanned"] = edges_scanned_;
  nlohmann::json list = nlohmann::json::array();
  for (const TraversalResult& t : done_)
    list.push_back({{"source", t.source}, {"reached", t.reached}, {"levels", t.level_sizes.size()},
                    {"level_sizes", t.level_sizes}, {"edges_scanned", t.edges_scanned}});
  j["traversals"] = list;  // the first kMaxReportedTraversals
  j["finished"] = finished();
  j["step"] = "host loop (cpu, push: edges_scanned counts the frontier's out-edges)";
  return j;
}

std::string BfsLane::save_device() const {
  StateWriter w;
  w.put(kDeviceStateVersion);
  w.put(g_.vertices);
  w.put(g_.edges);
  device_->save_into(w);
  return w.take();
}

void BfsLane::load_device(const std::string& state) {
  StateReader r(state, "bfs");
  const auto version = r.get<std::uint32_t>();
  if (version == kHostStateVersion)
    throw LaneError("bfs: saved state is from the host (push) step, this run uses the backend (pull) step "
                    "([lane.bfs] step)");
  if (version != kDeviceStateVersion) throw LaneError("bfs: saved state has another version");
  const auto n = r.get<std::uint64_t>();
  const auto m = r.get<std::uint64_t>();
  if (n != g_.vertices || m != g_.edges)
    throw LaneError("bfs: saved state is for a graph of " + std::to_string(n) + " vertices / " + std::to_string(m) +
                    " edges, this one has " + std::to_string(g_.vertices) + " / " + std::to_string(g_.edges));
  device_->load_from(r);
  if (!r.at_end()) throw LaneError("bfs: saved state has trailing bytes");
}

nlohmann::json BfsLane::report_device() const {
  device_->sync();  // summary time: the state as the device has it
  struct {
    BfsState state;
    std::vector<BfsTraversalRecord> records;
    std::vector<std::uint64_t> level_sizes;
  } s{device_->state(), device_->records(), device_->level_sizes()};
  nlohmann::json j;
  j["source"] = source_.describe();
  j["vertices"] = g_.vertices;
  j["edges"] = g_.edges;
  j["undirected"] = undirected_;
  j["traversals_done"] = s.state.traversal;
  j["edges_scanned"] = s.state.edges_total + s.state.edges;
  nlohmann::json list = nlohmann::json::array();
  const auto recorded = std::min<std::uint64_t>(static_cast<std::uint64_t>(s.state.traversal), s.records.size());
  for (std::uint64_t t = 0; t < recorded; ++t) {
    const BfsTraversalRecord& rec = s.records[t];
    const std::uint64_t* sizes = s.level_sizes.data() + t * kBfsRecordedLevels;
    const std::vector<std::uint64_t> level_sizes(sizes, sizes + std::min<std::uint64_t>(rec.levels, kBfsRecordedLevels));
    list.push_back({{"source", rec.source}, {"reached", rec.reached}, {"levels", rec.levels},
                    {"level_sizes", level_sizes}, {"edges_scanned", rec.edges}});
  }
  j["traversals"] = list;  // the first kMaxReportedTraversals; level_sizes of the first kBfsRecordedLevels levels
  j["finished"] = s.state.done != 0;
  j["step"] = "Backend::bfs_step on " + backend_name_ +
              " (pull: edges_scanned counts in-edges of unreached vertices read up to a parent, "
              "not the host step's frontier out-edges)";
  return j;
}

}  // namespace

std::unique_ptr<Lane> make_bfs_lane() { return std::make_unique<BfsLane>(); }

}  // namespace pipelane
