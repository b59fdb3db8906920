// The bfs lane's pull (bottom-up) traversal through Backend::bfs_step (runtime/backend.h): the
// in-edge CSR, both depth buffers, the traversal state and its records in the lane's arena
// (device memory on a GPU), the graph uploaded once; each step enqueues one bounded slice of
// whole vertices on the lane's stream and returns at once. Whether a traversal (and the run) has
// ended is decided by the op on the device (later steps are no-ops there), so the host never
// waits in a gap: the state comes back into pinned memory behind an event after every pass, and is
// read at a later step once the event has completed; sync() waits (save, report, teardown).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "lanes/builtin/state_bytes.h"
#include "lanes/lane.h"

namespace pipelane {

// A CSR by destination in host memory (the in-neighbours of v are sources[offsets[v] .. offsets[v+1])).
struct BfsHostCsr {
  const std::uint64_t* offsets;
  const std::uint32_t* sources;
  std::uint64_t vertices, edges;
};

class BfsDeviceRun {
 public:
  // Everything the run resumes from: the state, the next slice's first vertex, both depth
  // buffers (the pass's input and its partly written output) and the traversal records.
  struct Snapshot {
    BfsState state;
    std::uint32_t vertex = 0;
    std::vector<std::int32_t> depth[2];
    std::vector<BfsTraversalRecord> records;
    std::vector<std::uint64_t> level_sizes;  // [records][kBfsRecordedLevels]
  };

  // Allocates from ctx.arena (ArenaQuotaError past the quota) and uploads the graph. A step takes
  // whole vertices up to slice_edges units (an in-edge or a vertex one unit each), at least one.
  // `record_capacity` traversals are recorded for the report.
  BfsDeviceRun(LaneContext& ctx, const BfsHostCsr& graph, std::uint64_t first_source, std::int64_t traversals,
               std::int64_t slice_edges, std::uint32_t record_capacity);

  // Enqueues the next slice and returns its in-edges (what it may read); 0 once the run is known
  // to be over, or while the host is 4 passes ahead of the state it has read back. Never waits.
  std::uint64_t step();
  bool finished() {  // never waits; can lag the device, sync() makes it exact
    poll();
    return finished_;
  }
  void sync();  // waits for the lane stream; state() is then the device's
  const BfsState& state() const { return known_; }
  // The depths the last complete pass wrote (after the run: the last traversal's), waits.
  std::vector<std::int32_t> depths();
  Snapshot snapshot();  // waits
  // The traversal records and their level sizes ([record][kBfsRecordedLevels]), waits.
  std::vector<BfsTraversalRecord> records();
  std::vector<std::uint64_t> level_sizes();
  // LaneError if the snapshot's vertex is not where a slice of this run starts.
  void restore(const Snapshot& s);
  // The snapshot as bytes after the lane's own header (waits), and back (LaneError when malformed).
  void save_into(StateWriter& w);
  void load_from(StateReader& r);

 private:
  void poll();
  template <typename T>
  std::vector<T> download(const T* device, std::size_t n);

  LaneContext& ctx_;
  std::uint32_t n_;
  std::uint64_t m_;
  std::uint64_t first_source_;
  std::int64_t traversals_;
  std::uint32_t record_capacity_;
  std::vector<std::uint32_t> slice_ends_;   // slice k is [k ? slice_ends_[k - 1] : 0, slice_ends_[k])
  std::vector<std::uint64_t> end_offsets_;  // its in-edges end at end_offsets_[k]
  std::uint64_t* offsets_;
  std::uint32_t* sources_;
  std::int32_t* depth_[2];
  BfsState* state_;
  BfsTraversalRecord* records_;
  std::uint64_t* level_sizes_;
  std::unique_ptr<Arena> readback_arena_;  // pinned host memory: the device copies the state here
  BfsState* readback_;
  std::unique_ptr<Event> readback_done_;
  bool readback_pending_ = false;
  BfsState known_;
  std::size_t slice_ = 0;            // the next slice
  std::uint64_t enqueued_passes_ = 0;  // passes whose last slice is enqueued
  bool finished_ = false;
};

}  // namespace pipelane
