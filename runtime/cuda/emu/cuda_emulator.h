// A CUDA emulator for kernel SOURCE compiled by a host compiler (g++): it lets the kernels that
// nvcc builds for the GPU run, unmodified, on the CPU in tests — under ThreadSanitizer and
// AddressSanitizer too — on machines without a GPU.
//
// Model (what a kernel sees):
// - Blocks run one after another, in a permuted order that changes from launch to launch (a
//   kernel that depends on block order, or on the order of atomics across blocks, then gives
//   different bits in two runs: the "run twice, bit-identical" tests catch it).
// - The threads of a block are real std::threads, all alive at once: one worker per thread index,
//   each looping over the blocks (workers are pooled across launches).
//   threadIdx/blockIdx/blockDim/gridDim are thread_locals.
// - __syncthreads (and _or/_and/_count) is a barrier over the block's threads; __syncwarp and the
//   warp built-ins (__shfl_*_sync, __ballot_sync, __any_sync, __all_sync) are barriers over the
//   32 lanes of a warp, with the values exchanged through a per-warp slot array (double-buffered,
//   so one barrier per shuffle suffices). The barriers are mutex + condition variable, which
//   ThreadSanitizer understands: shared-memory accesses not separated by a barrier are reported
//   as data races, as compute-sanitizer's racecheck would.
// - `__shared__` becomes `static`: one object per kernel (per template instance), which is the
//   block's shared memory because blocks never overlap and launches are serialised. Dynamic shared
//   memory (PIPELANE_DYNAMIC_SHARED in launch.cuh) is a heap block of exactly the launch's size,
//   refilled with 0xFF bytes (NaN for floats) before every block, so a kernel that reads it before
//   writing sees garbage (as on the GPU) and AddressSanitizer sees any access past its end.
// - atomicAdd/atomicMax/atomicMin/atomicExch/atomicCAS go through std::atomic_ref.
//
// Strictness (each is an error a real GPU would give, or undefined behaviour there): the launch
// configuration is checked against the device limits (<= 1024 threads, z <= 64, grid y/z <=
// 65535, dynamic shared memory <= 48 KiB, which needs no opt-in); warp built-ins need a full warp
// and a full mask; divergent barriers (some threads at __syncthreads, others at another barrier
// or finished) and barriers that never complete (deadlock, default 60 s, environment variable
// PIPELANE_EMU_BARRIER_TIMEOUT_S) stop the launch. Every such error makes launch() throw
// std::runtime_error with a message naming the kernel, the block and the barrier; the other
// threads are woken and unwound, so a test can assert on it.
//
// Not emulated here: memory spaces (device pointers are host pointers) and streams (run_grid runs
// the grid before returning; launch.cuh hands a launch on an emulated stream to that stream, see
// emulated_stream.h and the fake runtime), warp-synchronous code without __syncwarp (lanes are
// independent threads, as on Volta and later), partial-mask warp built-ins, clocks, inline PTX,
// tensor cores. Math functions are the host's (glibc's expf is not CUDA's: results differ in the
// last bits; tests compare with tolerances).
#pragma once

#if defined(__CUDACC__)
#error "cuda_emulator.h is for host compilers: nvcc compiles the kernels natively"
#endif

#include <cuda_bf16.h>     // __nv_bfloat16 and its conversions work in host code
#include <driver_types.h>  // cudaStream_t, cudaError_t
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector_types.h>  // dim3, uint3

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

// The CUDA headers define __shared__ as nothing for host compilers; here it is block-local
// storage (see above). __launch_bounds__ is only defined for nvcc.
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

namespace pipelane::cuda_emu {

// Thrown inside the emulated threads to unwind a kernel after an error; launch() turns the first
// error into std::runtime_error.
struct KernelAbort {};

enum class BarrierKind : std::uint8_t { SyncThreads, SyncOr, SyncAnd, SyncCount, Warp, BlockEnd };

inline const char* to_string(BarrierKind k) {
  switch (k) {
    case BarrierKind::SyncThreads: return "__syncthreads";
    case BarrierKind::SyncOr: return "__syncthreads_or";
    case BarrierKind::SyncAnd: return "__syncthreads_and";
    case BarrierKind::SyncCount: return "__syncthreads_count";
    case BarrierKind::Warp: return "a warp built-in (__shfl_*/__ballot/__syncwarp)";
    case BarrierKind::BlockEnd: return "the end of the kernel";
  }
  return "?";
}

inline std::chrono::milliseconds barrier_timeout() {
  const char* s = std::getenv("PIPELANE_EMU_BARRIER_TIMEOUT_S");
  const double seconds = s ? std::atof(s) : 60.0;
  return std::chrono::milliseconds(static_cast<long long>((seconds > 0 ? seconds : 60.0) * 1000));
}

class LaunchState;

// A reusable barrier for a fixed number of participants. Every arrival of one generation must be
// of the same kind (the same built-in), otherwise the threads have diverged. Arrivals may carry an
// int that is combined (or/and/count) and returned to all of them.
class Barrier {
 public:
  Barrier(LaunchState& launch, std::string name, int participants)
      : launch_(launch), name_(std::move(name)), participants_(participants) {}

  int arrive_and_wait(BarrierKind kind, int value = 0) { return arrive(kind, value, true); }
  // Arrives without waiting for the others (a thread leaving the block).
  void arrive_only(BarrierKind kind) { arrive(kind, 0, false); }
  void poison() {
    poisoned_.store(true);
    generation_.fetch_add(0x80000000u);  // wakes the waiters, who then see the poison
    wake_all();
  }

 private:
  int arrive(BarrierKind kind, int value, bool wait);

  LaunchState& launch_;
  const std::string name_;
  const int participants_;
  // Raw futex calls (std::atomic::wait/notify keep their own waiter bookkeeping, which a timed
  // wait cannot join).
  void wake_all() {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&generation_), FUTEX_WAKE_PRIVATE,
            INT32_MAX, nullptr, nullptr, 0);
  }
  // Sleeps until generation_ != gen or the deadline; false on timeout.
  bool wait_for_change(std::uint32_t gen, std::chrono::steady_clock::time_point deadline);

  std::mutex mu_;  // guards the arrival bookkeeping only; nobody waits while holding it
  int arrived_ = 0;
  BarrierKind kind_ = BarrierKind::SyncThreads;
  int combined_ = 0;
  int result_ = 0;
  std::atomic<std::uint32_t> generation_{0};
  std::atomic<bool> poisoned_{false};
};

// One warp: its barrier and the slots through which lanes exchange values.
struct Warp {
  Warp(LaunchState& launch, int index, int lanes)
      : barrier(launch, "warp " + std::to_string(index), lanes), lanes(lanes) {}
  Barrier barrier;
  const int lanes;
  std::uint64_t slots[2][32] = {};
};

// Everything one launch shares between its threads.
class LaunchState {
 public:
  LaunchState(std::string kernel, dim3 grid, dim3 block, std::size_t dynamic_smem)
      : kernel(std::move(kernel)),
        grid(grid),
        block(block),
        threads(static_cast<int>(block.x * block.y * block.z)),
        block_barrier(*this, "block", threads),
        dynamic_smem_bytes(dynamic_smem) {
    for (int w = 0; w * 32 < threads; ++w)
      warps.push_back(std::make_unique<Warp>(*this, w, std::min(32, threads - 32 * w)));
    if (dynamic_smem > 0)
      dynamic_smem_ptr.reset(
          static_cast<std::byte*>(::operator new[](dynamic_smem, std::align_val_t{16})));
  }

  // Records the first error, wakes every barrier, and unwinds the calling thread.
  [[noreturn]] void fail(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (error.empty()) error = what;
    }
    failed.store(true);
    block_barrier.poison();
    for (auto& w : warps) w->barrier.poison();
    throw KernelAbort{};
  }
  std::string where() const;  // "kernel K, block (x,y,z)" of the calling thread, for messages

  struct SmemDeleter {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{16}); }
  };

  const std::string kernel;
  const dim3 grid, block;
  const int threads;
  Barrier block_barrier;
  std::vector<std::unique_ptr<Warp>> warps;
  const std::size_t dynamic_smem_bytes;
  std::unique_ptr<std::byte, SmemDeleter> dynamic_smem_ptr;
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::string error;
};

// The emulated thread's view of the launch.
struct ThreadState {
  LaunchState* launch = nullptr;
  Warp* warp = nullptr;
  int lane = 0;
  unsigned shuffle_parity = 0;
};

inline thread_local ThreadState this_thread_state;

inline ThreadState& current_thread() {
  ThreadState& t = this_thread_state;
  if (!t.launch) {
    std::fputs("cuda_emulator: a device built-in was called outside an emulated kernel\n", stderr);
    std::abort();
  }
  return t;
}

inline bool Barrier::wait_for_change(std::uint32_t gen,
                                     std::chrono::steady_clock::time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return false;
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
  const long slice_ns = left < 100'000'000 ? static_cast<long>(left) : 100'000'000L;
  const timespec ts{0, slice_ns};
  // FUTEX_WAIT returns at once if the word changed already; a timeout just loops again.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&generation_), FUTEX_WAIT_PRIVATE, gen, &ts,
          nullptr, 0);
  return true;
}

inline int Barrier::arrive(BarrierKind kind, int value, bool wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (poisoned_.load()) throw KernelAbort{};
  if (arrived_ == 0) {
    kind_ = kind;
    combined_ = kind == BarrierKind::SyncAnd ? 1 : 0;
  } else if (kind != kind_) {
    const BarrierKind first = kind_;
    lock.unlock();
    launch_.fail("cuda_emulator: divergent barrier in " + launch_.where() + ": at the " + name_ +
                 " barrier one thread reached " + to_string(kind) + " while another reached " +
                 to_string(first));
  }
  switch (kind) {
    case BarrierKind::SyncOr: combined_ = combined_ || value; break;
    case BarrierKind::SyncAnd: combined_ = combined_ && value; break;
    case BarrierKind::SyncCount: combined_ += value != 0; break;
    default: break;
  }
  const std::uint32_t gen = generation_.load(std::memory_order_relaxed);
  if (++arrived_ == participants_) {
    arrived_ = 0;
    result_ = combined_;
    generation_.store(gen + 1, std::memory_order_release);
    lock.unlock();
    wake_all();
    return result_;
  }
  lock.unlock();
  if (!wait) return 0;
  // Waiting needs no lock: the last arrival publishes the new generation (release), which orders
  // every arrival's writes before every waiter's reads. A few yields first: the other threads are
  // usually runnable, and a yield is cheaper than sleeping and being woken.
  for (int i = 0; i < 8 && generation_.load(std::memory_order_acquire) == gen; ++i)
    std::this_thread::yield();
  const auto deadline = std::chrono::steady_clock::now() + barrier_timeout();
  while (generation_.load(std::memory_order_acquire) == gen) {
    if (poisoned_.load()) throw KernelAbort{};
    if (!wait_for_change(gen, deadline)) {
      lock.lock();
      const int arrived = arrived_;
      lock.unlock();
      if (generation_.load(std::memory_order_acquire) != gen) break;
      launch_.fail("cuda_emulator: deadlock in " + launch_.where() + ": only " +
                   std::to_string(arrived) + " of " + std::to_string(participants_) +
                   " threads reached " + to_string(kind) + " at the " + name_ +
                   " barrier (a barrier inside divergent code?)");
    }
  }
  if (poisoned_.load()) throw KernelAbort{};
  // result_ cannot be overwritten before this thread arrives at the next generation.
  return result_;
}

// ---- warp built-ins ----

inline unsigned full_mask(const Warp& w) {
  return w.lanes == 32 ? 0xffffffffu : ((1u << w.lanes) - 1u);
}

inline void check_warp_op(ThreadState& t, unsigned mask, const char* op) {
  if (t.warp->lanes != 32)
    t.launch->fail(std::string("cuda_emulator: ") + op + " in a partial warp (block of " +
                   std::to_string(t.launch->threads) + " threads) in " + t.launch->where() +
                   ": use a multiple of 32 threads");
  if (mask != full_mask(*t.warp))
    t.launch->fail(std::string("cuda_emulator: ") + op + " with a partial mask in " +
                   t.launch->where() + " (only full-warp masks are emulated)");
}

// Every lane publishes `v`; after the barrier lane i reads lane src(i)'s value.
template <typename T, typename SourceLane>
T exchange(unsigned mask, T v, SourceLane src, const char* op) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp shuffles move values of up to 8 bytes");
  ThreadState& t = current_thread();
  check_warp_op(t, mask, op);
  const unsigned buf = (t.shuffle_parity ^= 1u);
  std::memcpy(&t.warp->slots[buf][t.lane], &v, sizeof(T));
  t.warp->barrier.arrive_and_wait(BarrierKind::Warp);
  T out;
  std::memcpy(&out, &t.warp->slots[buf][src(t.lane)], sizeof(T));
  return out;
}

inline int checked_width(int width) {
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    ThreadState& t = current_thread();
    t.launch->fail("cuda_emulator: shuffle width " + std::to_string(width) +
                   " is not a power of two <= 32 in " + t.launch->where());
  }
  return width;
}

}  // namespace pipelane::cuda_emu

// ---- the CUDA built-ins, in the global namespace as in CUDA ----

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

inline void __syncthreads() {
  pipelane::cuda_emu::current_thread().launch->block_barrier.arrive_and_wait(
      pipelane::cuda_emu::BarrierKind::SyncThreads);
}
inline int __syncthreads_or(int p) {
  return pipelane::cuda_emu::current_thread().launch->block_barrier.arrive_and_wait(
      pipelane::cuda_emu::BarrierKind::SyncOr, p);
}
inline int __syncthreads_and(int p) {
  return pipelane::cuda_emu::current_thread().launch->block_barrier.arrive_and_wait(
      pipelane::cuda_emu::BarrierKind::SyncAnd, p);
}
inline int __syncthreads_count(int p) {
  return pipelane::cuda_emu::current_thread().launch->block_barrier.arrive_and_wait(
      pipelane::cuda_emu::BarrierKind::SyncCount, p);
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  auto& t = pipelane::cuda_emu::current_thread();
  pipelane::cuda_emu::check_warp_op(t, mask, "__syncwarp");
  t.warp->barrier.arrive_and_wait(pipelane::cuda_emu::BarrierKind::Warp);
}

inline unsigned __activemask() {
  return pipelane::cuda_emu::full_mask(*pipelane::cuda_emu::current_thread().warp);
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
  const int w = pipelane::cuda_emu::checked_width(width);
  return pipelane::cuda_emu::exchange(
      mask, v, [&](int lane) { return (lane & ~(w - 1)) + (src_lane & (w - 1)); }, "__shfl_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  const int w = pipelane::cuda_emu::checked_width(width);
  return pipelane::cuda_emu::exchange(
      mask, v,
      [&](int lane) {
        const int src = lane ^ lane_mask;
        return (src & ~(w - 1)) == (lane & ~(w - 1)) ? src : lane;  // outside the segment: own
      },
      "__shfl_xor_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int w = pipelane::cuda_emu::checked_width(width);
  return pipelane::cuda_emu::exchange(
      mask, v,
      [&](int lane) {
        const int src = lane + static_cast<int>(delta);
        return (src & ~(w - 1)) == (lane & ~(w - 1)) ? src : lane;
      },
      "__shfl_down_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int w = pipelane::cuda_emu::checked_width(width);
  return pipelane::cuda_emu::exchange(
      mask, v,
      [&](int lane) {
        const int src = lane - static_cast<int>(delta);
        return src >= (lane & ~(w - 1)) ? src : lane;
      },
      "__shfl_up_sync");
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  auto& t = pipelane::cuda_emu::current_thread();
  pipelane::cuda_emu::check_warp_op(t, mask, "__ballot_sync");
  const unsigned buf = (t.shuffle_parity ^= 1u);
  t.warp->slots[buf][t.lane] = predicate != 0;
  t.warp->barrier.arrive_and_wait(pipelane::cuda_emu::BarrierKind::Warp);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l) bits |= static_cast<unsigned>(t.warp->slots[buf][l] != 0) << l;
  return bits;
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) == mask;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }

template <typename T>
T __ldg(const T* p) {
  return *p;
}

[[noreturn]] inline void __trap() {
  auto& t = pipelane::cuda_emu::current_thread();
  t.launch->fail("cuda_emulator: __trap() in " + t.launch->where());
}

// Atomics. Float atomics exist (CUDA has them) but own kernels must not use them where the order
// of additions would change results.
template <typename T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v);
}
template <typename T>
T atomicExch(T* address, T v) {
  return std::atomic_ref<T>(*address).exchange(v);
}
template <typename T>
T atomicCAS(T* address, T compare, T v) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, v);
  return compare;
}
template <typename T>
T atomicMax(T* address, T v) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <typename T>
T atomicMin(T* address, T v) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

namespace pipelane::cuda_emu {

inline std::string LaunchState::where() const {
  return "kernel " + kernel + ", block (" + std::to_string(blockIdx.x) + "," +
         std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + ")";
}

inline std::byte* dynamic_shared_memory() {
  return current_thread().launch->dynamic_smem_ptr.get();
}

// The order blocks run in: a permutation that changes from launch to launch (seeded by a launch
// counter), or the linear order with PIPELANE_EMU_BLOCK_ORDER=linear (for debugging).
inline std::vector<std::uint32_t> block_order(std::uint32_t blocks, std::uint64_t seed) {
  std::vector<std::uint32_t> order(blocks);
  std::iota(order.begin(), order.end(), 0u);
  const char* mode = std::getenv("PIPELANE_EMU_BLOCK_ORDER");
  if (mode && std::string(mode) == "linear") return order;
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (std::uint32_t i = blocks; i > 1; --i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(order[i - 1], order[(s >> 33) % i]);
  }
  return order;
}

inline void check_configuration(const std::string& kernel, dim3 grid, dim3 block,
                                std::size_t smem) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  std::string why;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    why = "an empty grid or block";
  else if (threads > 1024)
    why = std::to_string(threads) + " threads per block (max 1024)";
  else if (block.z > 64)
    why = "blockDim.z > 64";
  else if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u)
    why = "grid too large";
  else if (smem > 48 * 1024)
    why = std::to_string(smem) + " bytes of dynamic shared memory (max 48 KiB without opt-in)";
  if (!why.empty())
    throw std::runtime_error("cuda_emulator: invalid launch configuration for " + kernel + ": " +
                             why);
}

// Worker threads that outlive a launch (starting a block's threads costs more than most emulated
// kernels): created on demand up to the largest block seen, parked between launches, joined at
// exit. One launch at a time uses them (run_grid serialises launches).
class WorkerPool {
 public:
  static WorkerPool& instance() {
    static WorkerPool pool;
    return pool;
  }
  // Runs job(i) on workers 0 .. n-1 and returns when all have finished.
  void run(int n, const std::function<void(int)>& job) {
    while (static_cast<int>(workers_.size()) < n) {
      workers_.push_back(std::make_unique<Worker>());
      Worker& w = *workers_.back();
      w.thread = std::thread([this, &w, i = static_cast<int>(workers_.size()) - 1] { loop(w, i); });
    }
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      remaining_ = n;
    }
    job_ = &job;
    for (int i = 0; i < n; ++i) {
      Worker& w = *workers_[i];
      std::lock_guard<std::mutex> lock(w.mu);
      w.has_job = true;
      w.cv.notify_one();
    }
    std::unique_lock<std::mutex> lock(done_mu_);
    done_cv_.wait(lock, [&] { return remaining_ == 0; });
    job_ = nullptr;
  }
  ~WorkerPool() {
    for (auto& w : workers_) {
      std::lock_guard<std::mutex> lock(w->mu);
      w->stop = true;
      w->cv.notify_one();
    }
    for (auto& w : workers_) w->thread.join();
  }

 private:
  struct Worker {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    bool has_job = false, stop = false;
  };
  void loop(Worker& w, int index) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(w.mu);
        w.cv.wait(lock, [&] { return w.has_job || w.stop; });
        if (w.stop) return;
        w.has_job = false;
      }
      (*job_)(index);
      std::lock_guard<std::mutex> lock(done_mu_);
      if (--remaining_ == 0) done_cv_.notify_one();
    }
  }
  std::vector<std::unique_ptr<Worker>> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  int remaining_ = 0;
};

// Process-wide launch state (not per kernel: launches of different kernels share the pool).
struct LaunchRegistry {
  std::mutex mutex;
  std::uint64_t launches = 0;  // seeds the block order; guarded by mutex
};
inline LaunchRegistry& launch_registry() {
  static LaunchRegistry registry;
  return registry;
}

// Runs body() as the kernel for every thread of every block; throws std::runtime_error when the
// kernel failed (divergence, deadlock, bad warp use, __trap).
template <typename Body>
void run_grid(const std::string& kernel, dim3 grid, dim3 block, std::size_t smem, Body body) {
  check_configuration(kernel, grid, block, smem);
  // __shared__ variables are function statics and the worker pool is shared: one launch at a
  // time in the process.
  LaunchRegistry& registry = launch_registry();
  std::lock_guard<std::mutex> serial(registry.mutex);
  LaunchState launch(kernel, grid, block, smem);
  const std::uint32_t blocks = grid.x * grid.y * grid.z;
  const std::vector<std::uint32_t> order = block_order(blocks, registry.launches++);
  const std::function<void(int)> worker = [&](int linear) {
    ThreadState& ts = this_thread_state;
    ts = ThreadState{&launch, launch.warps[linear / 32].get(), linear % 32, 0};
    threadIdx = uint3{static_cast<unsigned>(linear) % block.x,
                      static_cast<unsigned>(linear) / block.x % block.y,
                      static_cast<unsigned>(linear) / (block.x * block.y)};
    blockDim = block;
    gridDim = grid;
    try {
      for (std::uint32_t b : order) {
        blockIdx = uint3{b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)};
        if (smem > 0) {
          // The previous block's end barrier has passed: nobody reads shared memory now.
          if (linear == 0) std::memset(launch.dynamic_smem_ptr.get(), 0xff, smem);
          launch.block_barrier.arrive_and_wait(BarrierKind::BlockEnd);
        }
        body();
        // Leaving the block is an arrival of its own kind at both barriers, so a thread that
        // returns while others wait at __syncthreads or a shuffle is reported at once.
        ts.warp->barrier.arrive_only(BarrierKind::BlockEnd);
        launch.block_barrier.arrive_and_wait(BarrierKind::BlockEnd);
      }
    } catch (const KernelAbort&) {
      // the error is recorded in launch; nothing else to do in this thread
    }
    ts = ThreadState{};
  };
  WorkerPool::instance().run(launch.threads, worker);
  if (launch.failed.load()) throw std::runtime_error(launch.error);
}

}  // namespace pipelane::cuda_emu
