// The control plane: host-side coordination between ranks (MPI on every backend) — barriers,
// small reductions of host scalars, gathers to rank 0, broadcasts, agreement on failure. Training
// tensors never travel here; they take the stream-ordered data plane (data_plane.h).
#pragma once
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipelane {

// A pending host-side operation that can be polled.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual bool test() = 0;  // complete yet? (never blocks)
  virtual void wait() = 0;
};

// A pollable barrier that can also say who it is waiting for: rank 0 collects every rank's
// arrival, then releases them all, so rank 0 knows which ranks have not arrived (a stopped or
// lost rank is named, not guessed). missing() may be called from another thread.
class BarrierRequest : public CommRequest {
 public:
  // The ranks this barrier is still waiting for, as known here: on rank 0 those that have not
  // arrived; elsewhere rank 0 until it releases ("" once complete or when nothing is known).
  virtual std::string missing() const = 0;
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Tagged host messages (rank 0's gathers; never training tensors).
  virtual std::unique_ptr<CommRequest> isend(const void* data, std::size_t bytes, int dest, int tag) = 0;
  virtual std::unique_ptr<CommRequest> irecv(void* data, std::size_t bytes, int src, int tag) = 0;
  virtual void all_reduce_sum(double* data, std::size_t n) = 0;
  virtual void all_reduce_max(float* data, std::size_t n) = 0;
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // A barrier that can be polled: lets a stage that reached the step's gradient sync early fill
  // the wait for the slowest stage with other work.
  virtual std::unique_ptr<BarrierRequest> ibarrier() = 0;
};

// Every rank's string on rank 0 (in rank order); other ranks get an empty vector.
std::vector<std::string> gather_to_root(ControlPlane& plane, const std::string& mine);

}  // namespace pipelane
