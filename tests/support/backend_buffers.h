// Buffers of one test in a backend's arena (the CPU's, or the emulated or real CUDA backend's
// device memory), with host copies in and out. Each copy waits for the stream, so the host vector
// may go as soon as upload returns and a download's values are there.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/backend.h"

namespace pipelane::testing {

class BackendBuffers {
 public:
  BackendBuffers(Backend& backend, const char* name, std::size_t bytes)
      : backend_(backend), stream_(backend.create_stream(StreamPriority::High)),
        arena_(backend.create_arena(name, bytes)) {}
  template <typename T>
  T* upload(const std::vector<T>& host) {
    T* d = arena_->allocate_n<T>(host.size() + 1);  // + 1: never a zero-sized allocation
    backend_.copy(d, host.data(), host.size() * sizeof(T), *stream_);
    stream_->synchronize();
    return d;
  }
  template <typename T = float>
  T* zeros(std::size_t n) {
    return upload(std::vector<T>(n, T{}));
  }
  template <typename T>
  std::vector<T> download(const T* d, std::size_t n) {
    std::vector<T> h(n);
    backend_.copy(h.data(), d, n * sizeof(T), *stream_);
    stream_->synchronize();
    return h;
  }
  Backend& backend() { return backend_; }
  Stream& stream() { return *stream_; }

 private:
  Backend& backend_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Arena> arena_;
};

}  // namespace pipelane::testing
