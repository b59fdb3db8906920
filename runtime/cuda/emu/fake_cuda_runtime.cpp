// The fake CUDA runtime (see fake_cuda_runtime.h). The functions are defined against the
// toolkit's declarations, so a signature that drifts from the real one does not compile.
#include "runtime/cuda/emu/fake_cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/cuda/emu/emulated_stream.h"

using Clock = std::chrono::steady_clock;

namespace {

constexpr int kLeastPriority = 0, kGreatestPriority = -5;
constexpr int kMultiprocessors = 4;

struct Allocation {
  std::size_t bytes;
  cudaMemoryType type;
  CUmemPoolHandle_st* pool;  // null unless from a pool
};

class FakeStream;

// Everything the fake device holds, behind one mutex.
class FakeDevice {
 public:
  static FakeDevice& get() {
    static FakeDevice device;  // one per process, as a CUDA context
    return device;
  }

  std::mutex mu;
  std::map<std::uintptr_t, Allocation> allocations;  // by base address
  std::set<FakeStream*> streams;
  std::size_t capacity = std::size_t{4} << 30, device_bytes = 0;
  pipelane::cuda_emu::StreamMode mode = pipelane::cuda_emu::StreamMode::Deferred;
  cudaError_t sticky = cudaSuccess;
  std::string sticky_message;
  std::uint64_t stream_synchronizations = 0;  // host waits for a stream, for the tests

  // The allocation that holds [p, p + bytes), or null.
  const Allocation* find(const void* p, std::size_t bytes) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    auto it = allocations.upper_bound(at);
    if (it == allocations.begin()) return nullptr;
    --it;
    if (at < it->first || at - it->first > it->second.bytes || bytes > it->second.bytes - (at - it->first))
      return nullptr;
    return &it->second;
  }
  void fail(const std::string& message) {
    std::lock_guard lock(mu);
    if (sticky == cudaSuccess) {
      sticky = cudaErrorLaunchFailure;
      sticky_message = message;
      std::fprintf(stderr, "fake CUDA device: %s\n", message.c_str());
    }
  }
  cudaError_t sticky_error() {
    std::lock_guard lock(mu);
    return sticky;
  }
};

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t note(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

class FakeStream final : public CUstream_st {
 public:
  FakeStream(int priority, bool deferred) : priority_(priority), deferred_(deferred) {
    if (deferred_) worker_ = std::thread([this] { loop(); });
  }
  ~FakeStream() override {
    if (!deferred_) return;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();  // runs what is queued first, as a destroyed stream's work still completes
  }
  void submit(std::function<void()> work) override {
    if (!deferred_) {
      work();  // immediate: errors reach the caller as the launch's exception
      return;
    }
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_all();
  }
  void synchronize() {
    if (!deferred_) return;
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  bool idle() {
    std::lock_guard lock(mu_);
    return queue_.empty() && !busy_;
  }
  int priority() const { return priority_; }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      try {
        work();
      } catch (const std::exception& e) {
        FakeDevice::get().fail(e.what());
      } catch (...) {
        FakeDevice::get().fail("deferred stream work threw");
      }
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  const int priority_;
  const bool deferred_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread worker_;
};

// Outlives its cudaEvent_t while a record is queued (a destroyed event's pending work still runs).
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0, completed = 0;
  Clock::time_point at{};
  void wait_for(std::uint64_t target) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return completed >= target; });
  }
};

// A host buffer aligned like device memory (256 bytes).
void* aligned_bytes(std::size_t bytes) {
  return std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
}

FakeStream* as_stream(cudaStream_t s) { return static_cast<FakeStream*>(s); }

// Runs `work` in `stream`'s order (the null stream: now).
void in_order(cudaStream_t stream, std::function<void()> work) {
  if (stream)
    stream->submit(std::move(work));
  else
    work();
}

bool is_pageable(FakeDevice& d, const void* p, std::size_t bytes) { return d.find(p, bytes) == nullptr; }

// Checks a range of device or pinned memory; pageable host memory is the caller's to vouch for.
cudaError_t check_range(FakeDevice& d, const void* p, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = d.allocations.upper_bound(at);
  if (it != d.allocations.begin()) {
    --it;
    const std::uintptr_t end = it->first + it->second.bytes;
    // Starts inside an allocation but runs past its end: out of bounds.
    if (at >= it->first && at < end && bytes > end - at) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace

struct CUevent_st {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

struct CUmemPoolHandle_st {
  std::size_t max_size = 0;  // 0: the device's capacity
  std::size_t used = 0, used_high = 0;
  std::uint64_t release_threshold = 0;
};

namespace pipelane::cuda_emu {

void set_stream_mode(StreamMode mode) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  d.mode = mode;
}
StreamMode stream_mode() {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  return d.mode;
}
void set_device_capacity(std::size_t bytes) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  d.capacity = bytes;
}
std::size_t device_bytes_in_use() {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  return d.device_bytes;
}
std::uint64_t stream_synchronizations() {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  return d.stream_synchronizations;
}
std::string last_error_message() {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  return d.sticky_message;
}
void clear_sticky_error() {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  d.sticky = cudaSuccess;
  d.sticky_message.clear();
}

}  // namespace pipelane::cuda_emu

extern "C" {

// ---- errors ----

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}
const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (fake device)";
    case cudaErrorMemoryAllocation: return "out of memory (fake device)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (fake device)";
    case cudaErrorNotReady: return "device not ready (fake device)";
    case cudaErrorLaunchFailure: return "unspecified launch failure (fake device)";
    default: return "error (fake device)";
  }
}
cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return last_error; }

// ---- the device ----

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaSetDevice(int device) {
  return note(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}
cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (device != 0) return note(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "pipelane CUDA emulator (CPU)");
  prop->totalGlobalMem = FakeDevice::get().capacity;
  prop->multiProcessorCount = kMultiprocessors;
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (device != 0) return note(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = kMultiprocessors; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrClockRate: *value = 0; return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; return cudaSuccess;
    default: return note(cudaErrorInvalidValue);
  }
}
cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = kLeastPriority;
  if (greatestPriority) *greatestPriority = kGreatestPriority;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDriverGetVersion(int* driverVersion) {
  *driverVersion = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* runtimeVersion) {
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free, size_t* total) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  *total = d.capacity;
  *free = d.capacity - std::min(d.capacity, d.device_bytes);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  FakeDevice& d = FakeDevice::get();
  std::vector<FakeStream*> streams;
  {
    std::lock_guard lock(d.mu);
    streams.assign(d.streams.begin(), d.streams.end());
  }
  for (FakeStream* s : streams) s->synchronize();
  return note(d.sticky_error());
}
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char*, void** funcPtr, unsigned int, unsigned long long,
                                                       enum cudaDriverEntryPointQueryResult* driverStatus) {
  *funcPtr = nullptr;
  if (driverStatus) *driverStatus = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

// ---- memory ----

cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  if (size > d.capacity - std::min(d.capacity, d.device_bytes)) return note(cudaErrorMemoryAllocation);
  void* p = aligned_bytes(size);
  if (!p) return note(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, size);  // uninitialised device memory is garbage: NaN here
  d.allocations[reinterpret_cast<std::uintptr_t>(p)] = {size, cudaMemoryTypeDevice, nullptr};
  d.device_bytes += size;
  *devPtr = p;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  if (!devPtr) return cudaSuccess;
  cudaDeviceSynchronize();  // cudaFree synchronises the device
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  auto it = d.allocations.find(reinterpret_cast<std::uintptr_t>(devPtr));
  if (it == d.allocations.end() || it->second.type != cudaMemoryTypeDevice || it->second.pool)
    return note(cudaErrorInvalidValue);
  d.device_bytes -= it->second.bytes;
  d.allocations.erase(it);
  std::free(devPtr);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  void* p = aligned_bytes(size);
  if (!p) return note(cudaErrorMemoryAllocation);
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  d.allocations[reinterpret_cast<std::uintptr_t>(p)] = {size, cudaMemoryTypeHost, nullptr};
  *pHost = p;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  auto it = d.allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == d.allocations.end() || it->second.type != cudaMemoryTypeHost) return note(cudaErrorInvalidValue);
  d.allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  *attributes = cudaPointerAttributes{};
  const Allocation* a = d.find(ptr, 0);
  attributes->type = a ? a->type : cudaMemoryTypeUnregistered;
  attributes->device = 0;
  attributes->devicePointer = a ? const_cast<void*>(ptr) : nullptr;
  attributes->hostPointer = a && a->type == cudaMemoryTypeHost ? const_cast<void*>(ptr) : nullptr;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FakeDevice& d = FakeDevice::get();
  bool dst_pageable, src_pageable;
  {
    std::lock_guard lock(d.mu);
    if (check_range(d, dst, count) != cudaSuccess || check_range(d, src, count) != cudaSuccess)
      return note(cudaErrorInvalidValue);
    dst_pageable = is_pageable(d, dst, count);
    src_pageable = is_pageable(d, src, count);
  }
  if (dst_pageable) {
    // Into pageable memory the copy is complete when the call returns.
    if (stream) as_stream(stream)->synchronize();
    std::memmove(dst, src, count);
  } else if (src_pageable) {
    // From pageable memory the source is taken at the call; the caller may reuse it at once.
    auto bytes = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + count);
    in_order(stream, [dst, bytes] { std::memcpy(dst, bytes->data(), bytes->size()); });
  } else {
    in_order(stream, [dst, src, count] { std::memmove(dst, src, count); });
  }
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                        size_t height, enum cudaMemcpyKind, cudaStream_t stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) return note(cudaErrorInvalidValue);
  FakeDevice& d = FakeDevice::get();
  const std::size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  {
    std::lock_guard lock(d.mu);
    if (check_range(d, dst, dspan) != cudaSuccess || check_range(d, src, sspan) != cudaSuccess ||
        is_pageable(d, dst, dspan) || is_pageable(d, src, sspan))
      return note(cudaErrorInvalidValue);  // the backend copies 2D only between device buffers
  }
  in_order(stream, [=] {
    for (std::size_t r = 0; r < height; ++r)
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  });
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FakeDevice& d = FakeDevice::get();
  {
    std::lock_guard lock(d.mu);
    if (!d.find(devPtr, count)) return note(cudaErrorInvalidValue);
  }
  in_order(stream, [=] { std::memset(devPtr, value, count); });
  return cudaSuccess;
}

// ---- pools ----

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) {
  if (poolProps->location.type != cudaMemLocationTypeDevice || poolProps->location.id != 0)
    return note(cudaErrorInvalidValue);
  auto* pool = new CUmemPoolHandle_st;
  pool->max_size = poolProps->maxSize;
  *memPool = pool;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  delete memPool;  // the real pool defers this until its allocations are freed; ours are
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  // The reuse policies are accepted and have nothing to change here: a fake pool never reuses a
  // block before its free has run in its stream's order.
  if (attr == cudaMemPoolReuseAllowInternalDependencies || attr == cudaMemPoolReuseAllowOpportunistic ||
      attr == cudaMemPoolReuseFollowEventDependencies)
    return cudaSuccess;
  if (attr != cudaMemPoolAttrReleaseThreshold) return note(cudaErrorInvalidValue);
  memPool->release_threshold = *static_cast<std::uint64_t*>(value);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  auto* out = static_cast<std::uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: *out = memPool->release_threshold; return cudaSuccess;
    case cudaMemPoolAttrUsedMemCurrent:
    case cudaMemPoolAttrReservedMemCurrent: *out = memPool->used; return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
    case cudaMemPoolAttrReservedMemHigh: *out = memPool->used_high; return cudaSuccess;
    default: return note(cudaErrorInvalidValue);
  }
}
cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  const std::size_t limit = memPool->max_size ? memPool->max_size : d.capacity;
  if (size > limit - std::min(limit, memPool->used) || size > d.capacity - std::min(d.capacity, d.device_bytes))
    return note(cudaErrorMemoryAllocation);
  void* p = aligned_bytes(size);
  if (!p) return note(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, size);
  d.allocations[reinterpret_cast<std::uintptr_t>(p)] = {size, cudaMemoryTypeDevice, memPool};
  d.device_bytes += size;
  memPool->used += size;
  memPool->used_high = std::max(memPool->used_high, memPool->used);
  *ptr = p;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  if (!devPtr) return cudaSuccess;
  FakeDevice& d = FakeDevice::get();
  {
    std::lock_guard lock(d.mu);
    auto it = d.allocations.find(reinterpret_cast<std::uintptr_t>(devPtr));
    if (it == d.allocations.end() || !it->second.pool) return note(cudaErrorInvalidValue);
  }
  // Freed when the stream gets there: work queued before may still use it.
  in_order(hStream, [devPtr] {
    FakeDevice& dev = FakeDevice::get();
    std::lock_guard lock(dev.mu);
    auto it = dev.allocations.find(reinterpret_cast<std::uintptr_t>(devPtr));
    it->second.pool->used -= it->second.bytes;
    dev.device_bytes -= it->second.bytes;
    dev.allocations.erase(it);
    std::free(devPtr);
  });
  return cudaSuccess;
}

// ---- streams ----

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int, int priority) {
  FakeDevice& d = FakeDevice::get();
  std::lock_guard lock(d.mu);
  // Out-of-range priorities are clamped silently, as the runtime does.
  const int clamped = std::clamp(priority, kGreatestPriority, kLeastPriority);
  auto* s = new FakeStream(clamped, d.mode == pipelane::cuda_emu::StreamMode::Deferred);
  d.streams.insert(s);
  *pStream = s;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  *priority = hStream ? as_stream(hStream)->priority() : kLeastPriority;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  FakeDevice& d = FakeDevice::get();
  {
    std::lock_guard lock(d.mu);
    if (!d.streams.erase(as_stream(stream))) return note(cudaErrorInvalidResourceHandle);
  }
  delete as_stream(stream);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  {
    FakeDevice& d = FakeDevice::get();
    std::lock_guard lock(d.mu);
    ++d.stream_synchronizations;
  }
  if (stream) as_stream(stream)->synchronize();
  return note(FakeDevice::get().sticky_error());
}
cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  return !stream || as_stream(stream)->idle() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  in_order(stream, [fn, userData] { fn(userData); });
  return cudaSuccess;
}

// ---- events ----

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::shared_ptr<EventState> state = event->state;
  std::uint64_t target;
  {
    std::lock_guard lock(state->mu);
    target = ++state->recorded;
  }
  in_order(stream, [state, target] {
    std::lock_guard lock(state->mu);
    state->completed = std::max(state->completed, target);
    state->at = Clock::now();
    state->cv.notify_all();
  });
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  std::lock_guard lock(event->state->mu);
  return event->state->completed >= event->state->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  std::uint64_t target;
  {
    std::lock_guard lock(event->state->mu);
    target = event->state->recorded;
  }
  event->state->wait_for(target);
  return note(FakeDevice::get().sticky_error());
}
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  std::shared_ptr<EventState> state = event->state;
  std::uint64_t target;
  {
    std::lock_guard lock(state->mu);
    target = state->recorded;  // the record most recently issued, as in CUDA
  }
  in_order(stream, [state, target] { state->wait_for(target); });
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::scoped_lock lock(start->state->mu, end->state->mu);
  if (start->state->recorded == 0 || end->state->recorded == 0) return note(cudaErrorInvalidResourceHandle);
  if (start->state->completed < start->state->recorded || end->state->completed < end->state->recorded)
    return note(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->state->at - start->state->at).count();
  return cudaSuccess;
}

}  // extern "C"
