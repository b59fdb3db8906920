// The Lane API: an iterative side workload that runs inside pipeline bubbles. A lane gets its own
// memory arena (hard quota), a low-priority stream and its [lane.NAME] options; it does one
// bounded unit of work per step() so the gap scheduler can fit steps into measured gaps.
// Built-ins live in lanes/builtin/, plugins implement the C ABI of lanes/pipelane_lane.h.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/arena.h"
#include "runtime/backend.h"

namespace pipelane {

// A lane's own failure (bad option, bad input, a broken step). The gap scheduler quarantines the
// lane; training never sees it.
class LaneError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The [lane.NAME] section as given. A lane reads its keys through the typed getters, then calls
// reject_unknown(): any key it did not read is a LaneError naming the file, section and key.
class LaneOptions {
 public:
  LaneOptions() = default;
  LaneOptions(std::string lane, std::map<std::string, std::string> values, std::string source)
      : lane_(std::move(lane)), values_(std::move(values)), source_(std::move(source)) {}

  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::int64_t get_int(const std::string& key, std::int64_t fallback, std::int64_t min_value,
                       std::int64_t max_value) const;
  double get_double(const std::string& key, double fallback, double min_value, double max_value) const;
  bool get_bool(const std::string& key, bool fallback) const;
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  void reject_unknown() const;
  const std::string& lane() const { return lane_; }
  const std::string& source() const { return source_; }  // where the keys came from
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::string where(const std::string& key) const;  // "configs/x.ini: [lane.pagerank] key"
  std::string lane_;
  std::map<std::string, std::string> values_;
  std::string source_;
  mutable std::set<std::string> used_;
};

struct LaneContext {
  Backend& backend;        // the rank's backend: a lane computes through it, like training does
  Stream& stream;          // low priority
  Arena& arena;            // everything the lane allocates comes from here (hard quota)
  const LaneOptions& options;
  std::string output_dir;  // the lane's own directory (created by the runtime)
  int rank = 0;            // world rank: lanes on different ranks can seed/shard by it
  std::uint64_t seed = 0;
  // The same lanes run on every rank of every stage that runs lanes: one instance per such rank.
  // An instance doing its share of one job (one input split over the job) shards by these.
  int world_size = 1;
  int instance_index = 0;  // 0 .. instance_count - 1, in world-rank order
  int instance_count = 1;
};

class Lane {
 public:
  virtual ~Lane() = default;
  virtual std::string name() const = 0;
  // What step() counts ("edges", "images", "tokens", "requests", "cpu_ms").
  virtual std::string work_unit() const = 0;
  // Reads and validates options (reject_unknown), allocates from ctx.arena, prepares inputs.
  virtual void setup(LaneContext& ctx) = 0;
  // One bounded unit of work; returns the work units it did. Throws LaneError on failure.
  virtual double step(LaneContext& ctx) = 0;
  virtual bool finished() const = 0;
  // True when setup() and step() touch the lane's arena only through ctx.backend's copies and ops
  // on ctx.stream (never dereferencing it on the host): on a device backend such a lane gets a
  // device arena from a pool whose limit is its quota, and its steps are enqueued on its
  // low-priority stream. Its step() may still wait for ctx.stream where it needs a value on the
  // host: steps run on a host thread of the lane's own, never holding training's. Otherwise (the
  // default) its arena is host memory and its code runs on the CPU, whatever the backend.
  virtual bool runs_on_device() const { return false; }
  // Progress that survives a restart: save() after any step, load() after setup().
  virtual std::string save() const = 0;
  virtual void load(const std::string& state) = 0;
  // What the work achieved, for summary.json (lane-specific fields).
  virtual nlohmann::json report() const = 0;
  // Called once when training ends or the lane is quarantined (write outputs, stop processes).
  virtual void teardown(LaneContext&) {}
};

}  // namespace pipelane
