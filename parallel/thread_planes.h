// Both communication planes between threads of one process: a whole parallel job (tp x dp x pp
// ranks) runs as threads, so the executor and everything above it can be tested without mpirun.
// Semantics follow the MPI planes: point-to-point matched in issue order per (plane, source,
// destination), sends buffered (complete at once), collectives deterministic — every rank sums
// in rank order and gets bit-identical results.
#pragma once
#include <memory>

#include "parallel/rank_grid.h"
#include "parallel/topology.h"

namespace pipelane {

class ThreadJob {
 public:
  explicit ThreadJob(ParallelDims dims);
  ~ThreadJob();
  ThreadJob(const ThreadJob&) = delete;
  ThreadJob& operator=(const ThreadJob&) = delete;

  // The topology of world rank `rank` (every group's planes). Call once per rank, from any thread;
  // the planes may then be used from that rank's thread only. The job must outlive them.
  Topology topology(int rank);
  const RankGrid& grid() const;

 private:
  struct Shared;
  std::unique_ptr<Shared> shared_;
};

}  // namespace pipelane
