// One interface for point-to-point and collective communication within a group of ranks:
// MPI on the CPU backend, NCCL (later) on CUDA. Sends and receives are non-blocking and return a
// request that can be polled, which is what lets a stage notice a transfer arriving while it
// fills the wait with other work.
#pragma once
#include <cstddef>
#include <memory>

namespace pipelane {

class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual bool test() = 0;  // complete yet? (never blocks)
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::unique_ptr<CommRequest> isend(const void* data, std::size_t bytes, int dest, int tag) = 0;
  virtual std::unique_ptr<CommRequest> irecv(void* data, std::size_t bytes, int src, int tag) = 0;
  virtual void all_reduce_sum(float* data, std::size_t n) = 0;
  // Non-blocking all-reduce (in place); the buffer must stay untouched until the request completes.
  virtual std::unique_ptr<CommRequest> iall_reduce_sum(float* data, std::size_t n) = 0;
  virtual void all_reduce_sum(double* data, std::size_t n) = 0;
  virtual void all_reduce_max(float* data, std::size_t n) = 0;
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // A barrier that can be polled: lets a stage that reached the step's gradient sync early fill
  // the wait for the slowest stage with other work.
  virtual std::unique_ptr<CommRequest> ibarrier() = 0;
};

// A group of one: collectives are identities, point-to-point is an error.
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace pipelane
