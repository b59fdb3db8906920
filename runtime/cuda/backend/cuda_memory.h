// Where the CUDA backend's memory comes from:
// - DeviceMemory: arenas of device memory (training): one cudaMalloc per arena, released with
//   cudaFree when the arena goes (which synchronises the device: arenas live as long as a run);
// - PoolMemory: an arena reserved from a cudaMemPool of its own whose maxSize is the arena's
//   quota (lanes): reserved and released in stream order on the pool's stream, so creating or
//   dropping a lane's arena never synchronises the device, and the pool's limit refuses anything
//   past the quota a second time (the arena's bump allocator refuses it first);
// - PinnedMemory: page-locked host staging (cudaHostAlloc), which copies can overlap with compute;
// - ScratchPool: the backend's own temporaries (op scratch, staged token ids, the attention's
//   permuted q/k/v), allocated and freed in the order of the op's stream, outside every arena.
// Arena zero-fills of device memory run on the resource's own stream and are waited for there
// (one stream, never the device).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/arena.h"

namespace pipelane::cuda {

class DeviceMemory final : public MemoryResource {
 public:
  explicit DeviceMemory(int device);
  ~DeviceMemory() override;
  MemoryKind kind() const override { return MemoryKind::Device; }
  void* reserve(std::size_t bytes, std::size_t alignment) override;
  void release(void* p) override;
  void zero(void* p, std::size_t bytes) override;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

class PinnedMemory final : public MemoryResource {
 public:
  MemoryKind kind() const override { return MemoryKind::PinnedHost; }
  void* reserve(std::size_t bytes, std::size_t alignment) override;
  void release(void* p) override;
  void zero(void* p, std::size_t bytes) override;
};

// The pool's maxSize is the quota rounded up to the allocation granularity of CUDA's pools.
constexpr std::size_t kPoolGranularity = std::size_t{2} << 20;

class PoolMemory final : public MemoryResource {
 public:
  PoolMemory(int device, std::size_t quota_bytes);
  ~PoolMemory() override;
  MemoryKind kind() const override { return MemoryKind::Device; }
  void* reserve(std::size_t bytes, std::size_t alignment) override;  // null when the pool refuses
  // The owner must have finished the work that uses the memory (the lane's stream synchronised).
  void release(void* p) override;
  void zero(void* p, std::size_t bytes) override;
  std::size_t max_size() const { return max_size_; }
  std::uint64_t used_bytes() const;  // cudaMemPoolAttrUsedMemCurrent
  std::uint64_t used_high() const;   // cudaMemPoolAttrUsedMemHigh

 private:
  int device_;
  std::size_t max_size_;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// A temporary of the op running on `stream`: allocated in the stream's order from the scratch
// pool and freed in it when the object goes (after the work enqueued so far), so a temporary never
// outlives its use and two streams never share one.
class ScratchPool {
 public:
  explicit ScratchPool(int device);
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void free(void* p, cudaStream_t stream);
  std::uint64_t used_high() const;

 private:
  cudaMemPool_t pool_ = nullptr;
};

template <typename T>
class Temp {
 public:
  Temp(ScratchPool& pool, std::size_t n, cudaStream_t stream)
      : pool_(pool), stream_(stream), p_(static_cast<T*>(pool.allocate(n * sizeof(T), stream))) {}
  ~Temp() { pool_.free(p_, stream_); }
  Temp(const Temp&) = delete;
  Temp& operator=(const Temp&) = delete;
  T* get() const { return p_; }

 private:
  ScratchPool& pool_;
  cudaStream_t stream_;
  T* p_;
};

}  // namespace pipelane::cuda
