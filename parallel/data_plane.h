// The data plane: training tensors between ranks, shaped like NCCL. Transfers and collectives of
// backend buffers are ordered on a Stream and complete as an Event; there are no tags: messages
// between two ranks of one plane are matched in the order they are issued, and that order comes
// from the schedule (parallel/schedule.h lowers it; a plane per direction keeps activations and
// gradients apart). MPI carries it on the CPU backend (and between hosts), NCCL on CUDA.
#pragma once
#include <cstddef>
#include <memory>

#include "runtime/backend.h"

namespace pipelane {

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Non-blocking point-to-point. The Event completes when the buffer may be reused (send) or
  // read (recv); until then the buffer must stay untouched.
  virtual std::unique_ptr<Event> send(const void* data, std::size_t bytes, int peer,
                                      Stream& stream) = 0;
  virtual std::unique_ptr<Event> recv(void* data, std::size_t bytes, int peer,
                                      Stream& stream) = 0;
  // In place, element-wise over the plane, in `stream`'s order. Deterministic: every rank gets
  // bit-identical results (the model relies on it to keep replicated tensors identical).
  virtual void all_reduce_sum(float* data, std::size_t n, Stream& stream) = 0;
  virtual void all_reduce_max(float* data, std::size_t n, Stream& stream) = 0;
  // Non-blocking all-reduce (sum, in place); the buffer stays untouched until the Event completes.
  virtual std::unique_ptr<Event> all_reduce_sum_async(float* data, std::size_t n,
                                                      Stream& stream) = 0;
  // out[size * n] = every rank's in[n], in rank order.
  virtual void all_gather(const float* in, float* out, std::size_t n, Stream& stream) = 0;
  // The distributed optimizer's pair (parallel/optimizer_shards.h), both in place and non-blocking.
  // Reduce-scatter (sum): `data` holds size() blocks of n floats; once the Event completes,
  // data[0, n) holds block rank() of the element-wise sum over the plane (MPI's in-place
  // convention) and the rest of `data` is undefined. Deterministic: the same inputs give the same
  // bits.
  virtual std::unique_ptr<Event> reduce_scatter_sum_async(float* data, std::size_t n, Stream& stream) = 0;
  // All-gather: block rank() of `data` (size() blocks of n floats) is this rank's; once the Event
  // completes, every block holds its rank's. It moves bytes, never computes on them: the
  // distributed optimizer gathers bf16 weights through it, two to a float.
  virtual std::unique_ptr<Event> all_gather_in_place_async(float* data, std::size_t n, Stream& stream) = 0;
};

// The Event of a host transfer that finished before it was returned (a group of one, a copy
// into an in-process mailbox).
class CompletedEvent final : public Event {
 public:
  void record(Stream&) override {}
  bool query() const override { return true; }
  void synchronize() override {}
  void wait_on(Stream&) override {}
  double elapsed_ms_since(const Event&) const override { return 0.0; }
};

}  // namespace pipelane
