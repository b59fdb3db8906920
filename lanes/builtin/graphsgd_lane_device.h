// The graphsgd lane's SGD through Backend::graphsgd_step (runtime/backend.h): ratings, CSR and
// latent vectors in the lane's arena (device memory on a GPU), uploaded once; each step enqueues
// one bounded slice of edges on the lane's stream and returns at once. The slices follow the host
// loop's accounting (an edge or a row passed one unit each) within one pass, so a state saved by
// either step resumes in the other. Whether the run is over (max iterations, or an RMSE below the
// tolerance) is decided by the op on the device; the host learns it from a copy into pinned memory
// behind an event after every iteration and never waits in a gap; sync() waits.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "lanes/lane.h"

namespace pipelane {

struct GraphSgdHostGraph {
  const std::uint64_t* offsets;  // CSR by source (users' rows)
  const std::uint32_t* items;
  const float* ratings;
  std::uint64_t vertices, edges;
};

struct GraphSgdConfig {
  int latent_dim;
  float learning_rate, lambda;
  std::int64_t max_iterations;
  double tolerance;
  std::int64_t slice_edges;
  std::uint32_t history_capacity;  // RMSE values kept (the first iterations')
};

class GraphSgdDeviceRun {
 public:
  // Where the next slice starts: the host loop's (pass, row, edge), pass 0 update, 1 RMSE.
  struct Position {
    std::uint32_t pass = 0;
    std::uint64_t row = 0, edge = 0;
  };
  struct Snapshot {
    GraphSgdState state;
    Position at;
    std::vector<double> rmse;  // min(iterations, history_capacity) values
    std::vector<float> user, item;
  };

  // Allocates from ctx.arena (ArenaQuotaError past the quota), uploads the graph and the initial
  // vectors (vertices * latent_dim floats each).
  GraphSgdDeviceRun(LaneContext& ctx, const GraphSgdHostGraph& graph, const GraphSgdConfig& config,
                    const float* user, const float* item);

  std::uint64_t step();  // enqueues the next slice, returns its edges; 0 once known over; never waits
  bool finished() {
    poll();
    return finished_;
  }
  void sync();
  const GraphSgdState& state() const { return known_; }
  std::vector<double> rmse_history();  // waits
  Snapshot snapshot();                 // waits
  // Any position the host loop can save (mid-row too); LaneError when out of range.
  void restore(Snapshot s);

 private:
  struct Slice {
    std::uint64_t row, edge_begin, edge_end;
  };
  void poll();
  void enqueue(std::uint32_t pass, std::uint64_t row, std::uint64_t begin, std::uint64_t end);

  LaneContext& ctx_;
  std::uint32_t n_;
  std::uint64_t m_;
  GraphSgdConfig config_;
  std::vector<Slice> slices_;  // one pass's, in order; the last ends at m_
  std::uint64_t* offsets_;
  std::uint32_t* items_;
  float* ratings_;
  float* user_;
  float* item_;
  GraphSgdState* state_;
  double* history_;
  std::unique_ptr<Arena> readback_arena_;
  GraphSgdState* readback_;
  std::unique_ptr<Event> readback_done_;
  bool readback_pending_ = false;
  GraphSgdState known_;
  std::uint32_t pass_ = 0;
  std::size_t slice_ = 0;
  Position resume_;            // a restored position inside slice_ (resume_from_ true)
  bool resume_from_ = false;
  std::int64_t enqueued_iterations_ = 0;
  bool finished_ = false;
};

}  // namespace pipelane
