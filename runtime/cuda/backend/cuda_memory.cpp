#include "runtime/cuda/backend/cuda_memory.h"

#include <cstring>
#include <limits>
#include <string>

#include "runtime/cuda/backend/cuda_check.h"

namespace pipelane::cuda {

namespace {

// cudaMalloc and the pools align to 256 bytes at least; arenas ask for 64.
constexpr std::size_t kDeviceAlignment = 256;

void check_alignment(std::size_t alignment) {
  if (alignment > kDeviceAlignment)
    throw std::invalid_argument("CUDA backend: arenas of device memory align to at most " +
                                std::to_string(kDeviceAlignment) + " bytes");
}

cudaStream_t resource_stream(int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  int least = 0, greatest = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  check_cuda(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, least), "cudaStreamCreateWithPriority");
  return s;
}

cudaMemPool_t make_pool(int device, std::size_t max_size) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  props.maxSize = max_size;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  // Keep what was reserved: returning it to the device at every synchronisation costs the next
  // allocation a driver call.
  std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
             "cudaMemPoolSetAttribute(release threshold)");
  return pool;
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t value = 0;
  check_cuda(cudaMemPoolGetAttribute(pool, attr, &value), "cudaMemPoolGetAttribute");
  return value;
}

}  // namespace

DeviceMemory::DeviceMemory(int device) : device_(device), stream_(resource_stream(device)) {}
DeviceMemory::~DeviceMemory() { cudaStreamDestroy(stream_); }

void* DeviceMemory::reserve(std::size_t bytes, std::size_t alignment) {
  check_alignment(alignment);
  cudaSetDevice(device_);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it
    return nullptr;      // the arena reports it as ArenaQuotaError
  }
  return p;
}
void DeviceMemory::release(void* p) { cudaFree(p); }
void DeviceMemory::zero(void* p, std::size_t bytes) {
  check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync (arena zero-fill)");
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (arena zero-fill)");
}

void* PinnedMemory::reserve(std::size_t bytes, std::size_t alignment) {
  check_alignment(alignment);
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}
void PinnedMemory::release(void* p) { cudaFreeHost(p); }
void PinnedMemory::zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }

PoolMemory::PoolMemory(int device, std::size_t quota_bytes)
    : device_(device),
      max_size_((quota_bytes + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity),
      pool_(make_pool(device, max_size_)),
      stream_(resource_stream(device)) {}
PoolMemory::~PoolMemory() {
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
  cudaMemPoolDestroy(pool_);
}
void* PoolMemory::reserve(std::size_t bytes, std::size_t alignment) {
  check_alignment(alignment);
  void* p = nullptr;
  if (cudaMallocFromPoolAsync(&p, bytes, pool_, stream_) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (pool reservation)");
  return p;
}
void PoolMemory::release(void* p) { cudaFreeAsync(p, stream_); }
void PoolMemory::zero(void* p, std::size_t bytes) {
  check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync (arena zero-fill)");
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (arena zero-fill)");
}
std::uint64_t PoolMemory::used_bytes() const { return pool_attribute(pool_, cudaMemPoolAttrUsedMemCurrent); }
std::uint64_t PoolMemory::used_high() const { return pool_attribute(pool_, cudaMemPoolAttrUsedMemHigh); }

ScratchPool::ScratchPool(int device) : pool_(make_pool(device, 0)) {
  // Every stream's temporaries come from this pool: by default CUDA may hand a block freed on one
  // stream to another by making the second wait for the first, so training's op could wait for a
  // lane's kernels. Without internal dependencies a block is reused only once its free is done
  // (or already ordered before the allocation); otherwise the pool reserves more.
  int no = 0;
  check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &no),
             "cudaMemPoolSetAttribute(reuse with internal dependencies)");
}
ScratchPool::~ScratchPool() { cudaMemPoolDestroy(pool_); }
void* ScratchPool::allocate(std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  check_cuda(cudaMallocFromPoolAsync(&p, bytes == 0 ? 1 : bytes, pool_, stream),
             ("cudaMallocFromPoolAsync (" + std::to_string(bytes) + " bytes of op scratch)").c_str());
  return p;
}
void ScratchPool::free(void* p, cudaStream_t stream) { cudaFreeAsync(p, stream); }
std::uint64_t ScratchPool::used_high() const { return pool_attribute(pool_, cudaMemPoolAttrUsedMemHigh); }

}  // namespace pipelane::cuda
