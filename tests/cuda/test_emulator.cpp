// The CPU emulator of CUDA kernels (runtime/cuda/emu/cuda_emulator.h): the built-ins give what
// the CUDA programming guide says they give, and what a GPU would refuse or leave undefined
// (divergent barriers, partial warps, bad launch configurations, deadlocks) makes the launch throw.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "runtime/cuda/kernels/launch.cuh"

// A namespace of its own: the emulated test executables are unity builds.
namespace pipelane::cuda_test::emulator_test {
namespace {

using cuda::launch;

// ---- kernels ----

// out[t * 5 + k]: lane t's result of xor 1, down 3, up 2, shfl from lane 7, xor 2 within width 8.
__global__ void shuffle_kernel(int* out) {
  const int lane = threadIdx.x % 32;
  const int v = 100 + static_cast<int>(threadIdx.x);
  int* o = out + threadIdx.x * 5;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 1);
  o[1] = __shfl_down_sync(0xffffffffu, v, 3);
  o[2] = __shfl_up_sync(0xffffffffu, v, 2);
  o[3] = __shfl_sync(0xffffffffu, v, 7);
  o[4] = __shfl_xor_sync(0xffffffffu, v, 2, 8);
  (void)lane;
}

// ballot of odd lanes, any/all, and the block-wide _or/_and/_count of "threadIdx.x < 40".
__global__ void vote_kernel(unsigned* out) {
  const int lane = threadIdx.x % 32;
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 2);
  const int any = __any_sync(0xffffffffu, lane == 5);
  const int all = __all_sync(0xffffffffu, lane < 32);
  const int p = threadIdx.x < 40;
  const int block_or = __syncthreads_or(p), block_and = __syncthreads_and(p);
  const int block_count = __syncthreads_count(p);
  unsigned* o = out + threadIdx.x * 6;
  o[0] = ballot;
  o[1] = any;
  o[2] = all;
  o[3] = block_or;
  o[4] = block_and;
  o[5] = block_count;
}

// Every (block, thread) adds one to its own counter; dims are recorded by the first thread.
__global__ void index_kernel(int* hits, unsigned* dims) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  atomicAdd(&hits[block * blockDim.x * blockDim.y * blockDim.z + thread], 1);
  if (block == 0 && thread == 0) {
    dims[0] = gridDim.x, dims[1] = gridDim.y, dims[2] = gridDim.z;
    dims[3] = blockDim.x, dims[4] = blockDim.y, dims[5] = blockDim.z;
  }
}

// A shared-memory tree reduction per block: sum of 0..blockDim-1.
__global__ void block_reduce_kernel(int* out) {
  __shared__ int s[256];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// Dynamic shared memory: what a thread sees before anyone writes (garbage: NaN bytes), then a
// value written by another thread.
__global__ void dynamic_smem_kernel(float* out) {
  PIPELANE_DYNAMIC_SHARED(float, buf);
  const float before = buf[threadIdx.x];
  __syncthreads();
  buf[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
  if (threadIdx.x == 0) out[gridDim.x * blockDim.x + blockIdx.x] = before;
}

__global__ void block_order_kernel(int* order, int* counter) {
  if (threadIdx.x == 0) order[blockIdx.x] = atomicAdd(counter, 1);
}

__global__ void divergent_sync_kernel(int* out) {
  if (threadIdx.x < 32)
    __syncthreads();
  else
    (void)__syncthreads_or(1);  // another block-wide built-in: the threads have diverged
  out[threadIdx.x] = 1;
}

__global__ void early_return_kernel(int* out) {
  if (threadIdx.x >= 40) return;  // the GPU would hang or misbehave at the barrier below
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void deadlock_kernel(int* out) {
  // Lane 0 of warp 0 waits for its warp, the rest of that warp for the block: neither completes.
  if (threadIdx.x == 0)
    __syncwarp();
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void partial_mask_kernel(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void trap_kernel(int* out) {
  if (blockIdx.x == 1 && threadIdx.x == 3) __trap();
  out[threadIdx.x] = 1;
}

// ---- tests ----

TEST(CudaEmulator, Shuffles) {
  std::vector<int> out(64 * 5);
  PIPELANE_LAUNCH(shuffle_kernel, dim3(1), dim3(64), 0, nullptr, out.data());
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = t - lane, v = 100 + t;
    EXPECT_EQ(out[t * 5 + 0], 100 + base + (lane ^ 1)) << t;
    EXPECT_EQ(out[t * 5 + 1], lane + 3 < 32 ? v + 3 : v) << t;  // past the end: own value
    EXPECT_EQ(out[t * 5 + 2], lane >= 2 ? v - 2 : v) << t;
    EXPECT_EQ(out[t * 5 + 3], 100 + base + 7) << t;
    EXPECT_EQ(out[t * 5 + 4], 100 + base + (lane ^ 2)) << t;  // stays within its 8 lanes
  }
}

TEST(CudaEmulator, VotesAndBlockReductions) {
  std::vector<unsigned> out(64 * 6);
  PIPELANE_LAUNCH(vote_kernel, dim3(1), dim3(64), 0, nullptr, out.data());
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(out[t * 6 + 0], 0xaaaaaaaau);
    EXPECT_EQ(out[t * 6 + 1], 1u);
    EXPECT_EQ(out[t * 6 + 2], 1u);
    EXPECT_EQ(out[t * 6 + 3], 1u);
    EXPECT_EQ(out[t * 6 + 4], 0u);
    EXPECT_EQ(out[t * 6 + 5], 40u);
  }
}

TEST(CudaEmulator, EveryBlockAndThreadRunsOnce) {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  std::vector<int> hits(3 * 2 * 2 * 8 * 4 * 2, 0);
  std::vector<unsigned> dims(6);
  PIPELANE_LAUNCH(index_kernel, grid, block, 0, nullptr, hits.data(), dims.data());
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_EQ(dims, (std::vector<unsigned>{3, 2, 2, 8, 4, 2}));
}

TEST(CudaEmulator, SharedMemoryIsPerBlockAndReused) {
  std::vector<int> out(5);
  PIPELANE_LAUNCH(block_reduce_kernel, dim3(5), dim3(256), 0, nullptr, out.data());
  for (int v : out) EXPECT_EQ(v, 255 * 256 / 2);
}

TEST(CudaEmulator, DynamicSharedMemoryStartsAsGarbage) {
  const int blocks = 3, threads = 64;
  std::vector<float> out(blocks * threads + blocks);
  PIPELANE_LAUNCH(dynamic_smem_kernel, dim3(blocks), dim3(threads), threads * sizeof(float),
                  nullptr, out.data());
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t)
      EXPECT_EQ(out[b * threads + t], static_cast<float>((t + 1) % threads));
    EXPECT_TRUE(std::isnan(out[blocks * threads + b])) << "block " << b;
  }
}

TEST(CudaEmulator, BlockOrderChangesBetweenLaunches) {
  const int blocks = 16;
  std::vector<int> first(blocks), second(blocks);
  int counter = 0;
  PIPELANE_LAUNCH(block_order_kernel, dim3(blocks), dim3(32), 0, nullptr, first.data(), &counter);
  counter = 0;
  PIPELANE_LAUNCH(block_order_kernel, dim3(blocks), dim3(32), 0, nullptr, second.data(), &counter);
  EXPECT_EQ(std::set<int>(first.begin(), first.end()).size(), static_cast<std::size_t>(blocks));
  EXPECT_NE(first, second);  // a kernel that depends on block order gives different bits
}

// Runs `f`, expecting std::runtime_error whose message contains `needle`.
template <typename F>
void expect_launch_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CudaEmulator, DivergentBarriersFailTheLaunch) {
  std::vector<int> out(96);
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(divergent_sync_kernel, dim3(2), dim3(96), 0, nullptr, out.data()); },
      "divergent");
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(early_return_kernel, dim3(1), dim3(64), 0, nullptr, out.data()); },
      "the end of the kernel");
  // The emulator is usable again after a failed launch.
  std::vector<int> sums(2);
  PIPELANE_LAUNCH(block_reduce_kernel, dim3(2), dim3(256), 0, nullptr, sums.data());
  EXPECT_EQ(sums[1], 255 * 256 / 2);
}

TEST(CudaEmulator, DeadlockTimesOut) {
  const char* old = std::getenv("PIPELANE_EMU_BARRIER_TIMEOUT_S");
  const std::string saved = old ? old : "";
  setenv("PIPELANE_EMU_BARRIER_TIMEOUT_S", "0.5", 1);
  std::vector<int> out(64);
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(deadlock_kernel, dim3(1), dim3(64), 0, nullptr, out.data()); },
      "deadlock");
  if (old)
    setenv("PIPELANE_EMU_BARRIER_TIMEOUT_S", saved.c_str(), 1);
  else
    unsetenv("PIPELANE_EMU_BARRIER_TIMEOUT_S");
}

TEST(CudaEmulator, WarpBuiltinsNeedFullWarpsAndMasks) {
  // Room for all 48 threads' five results: the full warp may write before the partial one fails.
  std::vector<int> out(48 * 5);
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(partial_mask_kernel, dim3(1), dim3(32), 0, nullptr, out.data()); },
      "partial mask");
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(shuffle_kernel, dim3(1), dim3(48), 0, nullptr, out.data()); },
      "partial warp");
}

TEST(CudaEmulator, TrapFailsTheLaunch) {
  std::vector<int> out(32);
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(trap_kernel, dim3(3), dim3(32), 0, nullptr, out.data()); },
      "__trap() in kernel trap_kernel, block (1,0,0)");
}

TEST(CudaEmulator, InvalidConfigurationsAreRefused) {
  int x = 0;
  expect_launch_error([&] { PIPELANE_LAUNCH(trap_kernel, dim3(1), dim3(1025), 0, nullptr, &x); },
                      "1025 threads");
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(trap_kernel, dim3(1), dim3(32), 49 * 1024, nullptr, &x); },
      "shared memory");
  expect_launch_error(
      [&] { PIPELANE_LAUNCH(trap_kernel, dim3(1, 70000), dim3(32), 0, nullptr, &x); },
      "grid too large");
  expect_launch_error([&] { PIPELANE_LAUNCH(trap_kernel, dim3(0), dim3(32), 0, nullptr, &x); },
                      "empty");
}

}  // namespace
}  // namespace pipelane::cuda_test::emulator_test
