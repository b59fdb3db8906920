// Arena: one reservation, aligned bump allocation, a hard quota. Going past the quota throws
// ArenaQuotaError naming the arena and the request; it never falls back to the system allocator,
// which is what lets a lane's overrun stay the lane's problem instead of training's.
//
// The reservation comes from a MemoryResource: host memory by default, or a backend's device or
// pinned memory (Backend::create_arena). Allocations are zero-filled through the resource, so an
// arena of device memory never touches its bytes from the host.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>

namespace pipelane {

class ArenaQuotaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// DevicePool is asked of Backend::create_arena, never reported by an arena: device memory reserved
// in stream order from a pool whose limit is the arena's quota (the lanes' kind: on CUDA a
// cudaMemPool with maxSize = quota, so the pool itself refuses past the quota). A backend without
// pools gives it Device memory; its arenas report Device.
enum class MemoryKind { Host, PinnedHost, Device, DevicePool };
const char* memory_kind_name(MemoryKind kind);

// Where an arena's one reservation comes from. Implementations live in the backends.
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  virtual MemoryKind kind() const = 0;
  // `bytes` (a multiple of `alignment`) aligned to `alignment`, or null when it cannot be had.
  virtual void* reserve(std::size_t bytes, std::size_t alignment) = 0;
  virtual void release(void* p) = 0;
  virtual void zero(void* p, std::size_t bytes) = 0;
};

// Ordinary host memory (aligned_alloc, memset). Stateless: one instance serves every arena.
MemoryResource& host_memory();

class Arena {
 public:
  static constexpr std::size_t kDefaultAlignment = 64;  // one cache line, and AVX-512 width

  // Host memory.
  Arena(std::string name, std::size_t capacity_bytes, std::size_t alignment = kDefaultAlignment);
  // Memory of `resource`, which must outlive the arena.
  Arena(std::string name, std::size_t capacity_bytes, MemoryResource& resource,
        std::size_t alignment = kDefaultAlignment);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Zero-filled memory of `bytes` bytes, or ArenaQuotaError. `what` names the request in errors.
  void* allocate(std::size_t bytes, const char* what = "allocation");
  template <typename T>
  T* allocate_n(std::size_t n, const char* what = "allocation") {
    if (n > static_cast<std::size_t>(-1) / sizeof(T))
      throw ArenaQuotaError("Arena '" + name_ + "': " + what + " of " + std::to_string(n) +
                            " elements overflows the address space");
    return static_cast<T*>(allocate(n * sizeof(T), what));
  }
  // Forget every allocation; the high-water mark is kept.
  void reset();

  const std::string& name() const { return name_; }
  MemoryKind kind() const { return resource_.kind(); }
  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }
  std::size_t high_water() const { return high_water_; }
  std::size_t alignment() const { return alignment_; }
  // True when p points into this arena's reservation.
  bool contains(const void* p) const;

 private:
  std::string name_;
  MemoryResource& resource_;
  std::size_t capacity_;
  std::size_t alignment_;
  std::size_t used_ = 0;
  std::size_t high_water_ = 0;
  unsigned char* base_ = nullptr;
};

// Bytes needed to place allocations of the given sizes one after another in an arena.
std::size_t arena_bytes_for(std::initializer_list<std::size_t> sizes,
                            std::size_t alignment = Arena::kDefaultAlignment);
inline std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace pipelane
