// Device, Stream and Event: the backend interface (ggml-style). Training compute, transfers and
// lanes each get their own Stream with a priority; models and lanes receive these objects, never a
// global. On the CPU backend a stream is the calling thread and ordering is program order, so an
// event is complete as soon as it is recorded.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "runtime/tensor.h"

namespace pipelane {

enum class StreamPriority { High, Normal, Low };  // training compute, transfers, lanes

class Stream {
 public:
  virtual ~Stream() = default;
  virtual StreamPriority priority() const = 0;
  virtual void synchronize() = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual bool query() const = 0;  // has the work before record() completed?
  virtual void synchronize() = 0;
  // Milliseconds between two recorded events (this one later).
  virtual double elapsed_ms_since(const Event& earlier) const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  virtual int threads() const = 0;  // worker threads the device's kernels use
  virtual std::unique_ptr<Stream> create_stream(StreamPriority priority) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
};

// CPU device with `threads` OpenMP/OpenBLAS threads (0: all cores). Creating it turns on
// flush-to-zero and denormals-are-zero on the calling thread and every OpenMP worker: denormals
// made a reference training run ten times slower on this hardware.
std::unique_ptr<Device> make_cpu_device(int threads = 0);

// Sets FTZ/DAZ on the calling thread only (for threads the device did not create).
void enable_flush_denormals_on_this_thread();
bool flush_denormals_enabled_on_this_thread();

}  // namespace pipelane
