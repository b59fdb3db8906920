// The pagerank lane's fp32 power iteration through Backend::pagerank_step (runtime/backend.h):
// its graph, rank vectors and iteration state in the lane's arena (device memory on a GPU),
// uploaded once; each step enqueues one bounded slice of whole destination vertices on the lane's
// stream and returns at once. Whether the run has converged is decided by the op on the device
// (later steps are no-ops there), so the host never waits for the lane stream in a gap: it learns
// the state from a copy into pinned memory behind an event, read at a later step once the event
// has completed, and waits only where waiting is harmless (sync(): save, report, teardown).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "lanes/lane.h"

namespace pipelane {

// A CSR by destination in host memory (the in-edges of v are sources[offsets[v] .. offsets[v+1])).
struct PagerankHostCsr {
  const std::uint64_t* offsets;
  const std::uint32_t* sources;
  const std::uint32_t* out_degree;
  std::uint64_t vertices, edges;
};

class PagerankDeviceRun {
 public:
  // Everything the run resumes from: the iteration state, the next slice's first vertex, and both
  // rank and contribution buffers (the iteration's input and its partly written output).
  struct Snapshot {
    PagerankState state;
    std::uint32_t vertex = 0;
    std::vector<float> rank[2], contrib[2];
  };

  // Allocates from ctx.arena (ArenaQuotaError past the quota) and uploads the graph and the
  // initial ranks 1/N. A step takes whole vertices up to slice_edges units (an in-edge or a vertex
  // one unit each), at least one vertex.
  PagerankDeviceRun(LaneContext& ctx, const PagerankHostCsr& graph, float damping, double tolerance,
                    std::int64_t max_iterations, std::int64_t slice_edges);

  // Enqueues the next slice and returns its in-edges; 0 once the run is known to be over, or when
  // every iteration up to max_iterations is already enqueued. Never waits.
  std::uint64_t step();
  // Known to be over (converged or at max_iterations): reads the state if its copy has arrived,
  // never waits. Can lag the device by the steps enqueued before that; sync() makes it exact.
  bool finished() {
    poll();
    return finished_;
  }
  // Waits for the lane stream; state() and finished() are then the device's.
  void sync();
  const PagerankState& state() const { return known_; }
  // The ranks of the last complete iteration (waits).
  std::vector<float> ranks();
  Snapshot snapshot();  // waits
  // LaneError if the snapshot's vertex is not where a slice of this run starts (another
  // slice_edges, mid-iteration).
  void restore(const Snapshot& s);

 private:
  void poll();  // reads the state copied behind readback_ if that has completed (never waits)
  std::vector<float> download(const float* device);

  LaneContext& ctx_;
  std::uint32_t n_;
  std::uint64_t m_;
  float damping_;
  double tolerance_;
  std::int64_t max_iterations_;
  // Slice k is [k ? slice_ends_[k - 1] : 0, slice_ends_[k]); its in-edges end at end_offsets_[k].
  std::vector<std::uint32_t> slice_ends_;
  std::vector<std::uint64_t> end_offsets_;
  std::uint64_t* offsets_;
  std::uint32_t* sources_;
  std::uint32_t* out_degree_;
  float* rank_[2];
  float* contrib_[2];
  float* delta_;
  PagerankState* state_;                    // in the arena
  std::unique_ptr<Arena> readback_arena_;   // pinned host memory: the device copies the state here
  PagerankState* readback_;
  std::unique_ptr<Event> readback_done_;
  bool readback_pending_ = false;
  PagerankState known_;                     // the state as the host last read it
  std::size_t slice_ = 0;                   // the next slice
  std::int64_t enqueued_iterations_ = 0;    // iterations whose last slice is enqueued
  bool finished_ = false;
};

}  // namespace pipelane
