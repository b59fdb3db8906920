#include "runtime/arena.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace pipelane {

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Host: return "host";
    case MemoryKind::PinnedHost: return "pinned host";
    case MemoryKind::Device: return "device";
    case MemoryKind::DevicePool: return "device pool";
  }
  return "?";
}

namespace {

class HostMemory final : public MemoryResource {
 public:
  MemoryKind kind() const override { return MemoryKind::Host; }
  void* reserve(std::size_t bytes, std::size_t alignment) override {
    return std::aligned_alloc(alignment, bytes);
  }
  void release(void* p) override { std::free(p); }
  void zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }
};

}  // namespace

MemoryResource& host_memory() {
  static HostMemory resource;  // stateless: aligned_alloc and free
  return resource;
}

Arena::Arena(std::string name, std::size_t capacity_bytes, std::size_t alignment)
    : Arena(std::move(name), capacity_bytes, host_memory(), alignment) {}

Arena::Arena(std::string name, std::size_t capacity_bytes, MemoryResource& resource,
             std::size_t alignment)
    : name_(std::move(name)), resource_(resource), capacity_(0), alignment_(alignment) {
  // Checked before align_up, which divides by the alignment.
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("Arena '" + name_ + "': alignment must be a power of two");
  if (capacity_bytes > static_cast<std::size_t>(-1) - alignment)
    throw ArenaQuotaError("Arena '" + name_ + "': " + std::to_string(capacity_bytes) +
                          " bytes overflow the address space");
  capacity_ = align_up(capacity_bytes, alignment);
  if (capacity_ > 0) {
    base_ = static_cast<unsigned char*>(resource_.reserve(capacity_, alignment_));
    if (!base_)
      throw ArenaQuotaError("Arena '" + name_ + "': cannot reserve " + std::to_string(capacity_) +
                            " bytes of " + memory_kind_name(resource_.kind()) + " memory");
  }
}

Arena::~Arena() {
  if (base_) resource_.release(base_);
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
  resource_.zero(p, bytes);
  return p;
}

void Arena::reset() { used_ = 0; }

bool Arena::contains(const void* p) const {
  const auto* b = static_cast<const unsigned char*>(p);
  return base_ && b >= base_ && b < base_ + capacity_;
}

std::size_t arena_bytes_for(std::initializer_list<std::size_t> sizes, std::size_t alignment) {
  std::size_t total = 0;
  for (std::size_t s : sizes) total += align_up(s == 0 ? 1 : s, alignment);
  return total;
}

}  // namespace pipelane
