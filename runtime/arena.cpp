#include "runtime/arena.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace pipelane {

Arena::Arena(std::string name, std::size_t capacity_bytes, std::size_t alignment)
    : name_(std::move(name)), capacity_(0), alignment_(alignment) {
  // Checked before align_up, which divides by the alignment.
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("Arena '" + name_ + "': alignment must be a power of two");
  capacity_ = align_up(capacity_bytes, alignment);
  if (capacity_ > 0) {
    base_ = static_cast<unsigned char*>(std::aligned_alloc(alignment_, capacity_));
    if (!base_)
      throw ArenaQuotaError("Arena '" + name_ + "': cannot reserve " + std::to_string(capacity_) +
                            " bytes from the system");
  }
}

Arena::Arena(std::string name, void* memory, std::size_t capacity_bytes, std::size_t alignment)
    : name_(std::move(name)), capacity_(0), alignment_(alignment), owned_(false) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("Arena '" + name_ + "': alignment must be a power of two");
  if (reinterpret_cast<std::uintptr_t>(memory) % alignment != 0)
    throw std::invalid_argument("Arena '" + name_ + "': memory is not aligned to " + std::to_string(alignment));
  capacity_ = capacity_bytes / alignment * alignment;
  base_ = static_cast<unsigned char*>(memory);
}

Arena::~Arena() {
  if (owned_) std::free(base_);
}

void* Arena::allocate(std::size_t bytes, const char* what) {
  // bytes is compared before it is rounded up: align_up wraps around for bytes near SIZE_MAX.
  const std::size_t size = bytes > capacity_ - used_ ? 0 : align_up(bytes == 0 ? 1 : bytes, alignment_);
  if (bytes > capacity_ - used_ || size > capacity_ - used_) {
    throw ArenaQuotaError("Arena '" + name_ + "': " + what + " of " + std::to_string(bytes) +
                          " bytes exceeds the quota (" + std::to_string(used_) + " of " +
                          std::to_string(capacity_) + " bytes in use)");
  }
  unsigned char* p = base_ + used_;
  used_ += size;
  if (used_ > high_water_) high_water_ = used_;
  std::memset(p, 0, bytes);
  return p;
}

void Arena::reset() { used_ = 0; }

std::size_t arena_bytes_for(std::initializer_list<std::size_t> sizes, std::size_t alignment) {
  std::size_t total = 0;
  for (std::size_t s : sizes) total += align_up(s == 0 ? 1 : s, alignment);
  return total;
}

}  // namespace pipelane
