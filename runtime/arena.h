// Arena: one reservation, aligned bump allocation, a hard quota. Going past the quota throws
// ArenaQuotaError naming the arena and the request; it never falls back to the system allocator,
// which is what lets a lane's overrun stay the lane's problem instead of training's.
#pragma once
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

namespace pipelane {

class ArenaQuotaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Arena {
 public:
  static constexpr std::size_t kDefaultAlignment = 64;  // one cache line, and AVX-512 width

  Arena(std::string name, std::size_t capacity_bytes, std::size_t alignment = kDefaultAlignment);
  // Over memory the caller owns and keeps alive (e.g. shared memory of a lane worker); `memory`
  // must be aligned to `alignment`, and only capacity_bytes rounded down to it are used.
  Arena(std::string name, void* memory, std::size_t capacity_bytes, std::size_t alignment = kDefaultAlignment);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Zero-filled memory of `bytes` bytes, or ArenaQuotaError. `what` names the request in errors.
  void* allocate(std::size_t bytes, const char* what = "allocation");
  template <typename T>
  T* allocate_n(std::size_t n, const char* what = "allocation") {
    return static_cast<T*>(allocate(n * sizeof(T), what));
  }
  // Forget every allocation; the high-water mark is kept.
  void reset();

  const std::string& name() const { return name_; }
  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }
  std::size_t high_water() const { return high_water_; }
  std::size_t alignment() const { return alignment_; }

 private:
  std::string name_;
  std::size_t capacity_;
  std::size_t alignment_;
  std::size_t used_ = 0;
  std::size_t high_water_ = 0;
  unsigned char* base_ = nullptr;
  bool owned_ = true;
};

// Bytes needed to place allocations of the given sizes one after another in an arena.
std::size_t arena_bytes_for(std::initializer_list<std::size_t> sizes,
                            std::size_t alignment = Arena::kDefaultAlignment);
inline std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace pipelane
