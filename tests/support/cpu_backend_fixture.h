// The CPU backend for tests that run model code directly: one per test process (all cores, as
// the op tests always ran), created on first use on the calling thread, which it gives FTZ/DAZ
// like a training rank's thread.
#pragma once
#include <memory>

#include "runtime/cpu/cpu_backend.h"

namespace pipelane::testing {

inline Backend& cpu_backend() {
  static const std::unique_ptr<Backend> backend = make_cpu_backend(0);
  return *backend;
}

inline Stream& cpu_stream() {
  static const std::unique_ptr<Stream> stream = cpu_backend().create_stream(StreamPriority::High);
  return *stream;
}

}  // namespace pipelane::testing
