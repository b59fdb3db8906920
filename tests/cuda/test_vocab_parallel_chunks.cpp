// The vocab-parallel LM head when its rows do not fit one chunk and the last chunk is short: two
// "ranks" (threads, each holding half the vocabulary, reducing through a shared buffer) must get
// the unsplit head's losses, on the CPU backend and on the emulated CUDA backend. (The row sums
// and the target logits of a chunk travel in one all-reduce of 2 x rows floats: they must be
// adjacent for every chunk, not only full ones.) The vocabulary is large so that a chunk holds
// fewer rows than the batch: 2 x 600000 columns, 48 rows a chunk, 64 rows.
#include <gtest/gtest.h>

#include <barrier>
#include <functional>
#include <random>
#include <thread>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"

namespace pipelane::cuda_test {
namespace {

constexpr int kN = 64, kC = 2, kHalf = 600000, kV = 2 * kHalf;

// An element-wise reduction over two threads: each deposits its buffer, both combine in rank order.
class PairReduce {
 public:
  void reduce(int rank, float* data, std::size_t n, Backend& backend, Stream& s, bool max) {
    host_[rank].resize(n);
    backend.copy(host_[rank].data(), data, n * sizeof(float), s);
    s.synchronize();
    sync_.arrive_and_wait();
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i)
      out[i] = max ? std::max(host_[0][i], host_[1][i]) : host_[0][i] + host_[1][i];
    sync_.arrive_and_wait();
    backend.copy(data, out.data(), n * sizeof(float), s);
    s.synchronize();
  }

 private:
  std::vector<float> host_[2];
  std::barrier<> sync_{2};
};

struct Inputs {
  std::vector<float> x, wte;
  std::vector<std::int32_t> targets;
};

Inputs inputs() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  Inputs in;
  in.x.resize(kN * kC);
  in.wte.resize(static_cast<std::size_t>(kV) * kC);
  for (float& v : in.x) v = d(rng);
  for (float& v : in.wte) v = d(rng);
  for (int n = 0; n < kN; ++n) in.targets.push_back((n * 104729) % kV);  // on both halves
  return in;
}

// Losses of rank `rank` of `ranks` (vocab rows [rank * V/ranks, ...)).
std::vector<float> head_losses(Backend& backend, const Inputs& in, int rank, int ranks, PairReduce* pair) {
  auto s = backend.create_stream(StreamPriority::High);
  const int Vl = kV / ranks, v0 = rank * Vl;
  const std::size_t scratch_n = backend.lm_head_vocab_parallel_scratch_floats(kN, Vl);
  auto arena = backend.create_arena("head", (scratch_n + 2 * static_cast<std::size_t>(Vl) * kC + 4 * kN * kC) *
                                                sizeof(float) + (1 << 16));
  float* x = arena->allocate_n<float>(in.x.size());
  float* wte = arena->allocate_n<float>(static_cast<std::size_t>(Vl) * kC);
  float* losses = arena->allocate_n<float>(kN);
  float* scratch = arena->allocate_n<float>(scratch_n);
  backend.copy(x, in.x.data(), in.x.size() * sizeof(float), *s);
  backend.copy(wte, in.wte.data() + static_cast<std::size_t>(v0) * kC, static_cast<std::size_t>(Vl) * kC * sizeof(float),
               *s);
  GroupReduce reduce{[&](float* d, std::size_t n) { if (pair) pair->reduce(rank, d, n, backend, *s, false); },
                     [&](float* d, std::size_t n) { if (pair) pair->reduce(rank, d, n, backend, *s, true); }};
  backend.lm_head_cross_entropy_vocab_parallel(losses, nullptr, nullptr, x, wte, in.targets.data(), kN, kC, kV, v0,
                                               Vl, 1.0f, scratch, reduce, *s);
  std::vector<float> out(kN);
  backend.copy(out.data(), losses, kN * sizeof(float), *s);
  s->synchronize();
  return out;
}

void expect_split_matches_whole(const std::function<std::unique_ptr<Backend>()>& make) {
  const Inputs in = inputs();
  const auto whole_backend = make();
  const std::vector<float> whole = head_losses(*whole_backend, in, 0, 1, nullptr);
  PairReduce pair;
  std::vector<float> split[2];
  std::thread other([&] {
    const auto b = make();
    split[1] = head_losses(*b, in, 1, 2, &pair);
  });
  const auto b = make();
  split[0] = head_losses(*b, in, 0, 2, &pair);
  other.join();
  for (int r = 0; r < 2; ++r)
    for (int n = 0; n < kN; ++n)  // the same sums in another grouping: a few fp32 ulps of ~14
      ASSERT_NEAR(split[r][n], whole[n], 1e-5 * whole[n]) << "rank " << r << " row " << n;
}

TEST(VocabParallelHead, AShortLastChunkReducesItsTargetLogitsOnTheCpuBackend) {
  expect_split_matches_whole([] { return make_cpu_backend(1); });
}

TEST(VocabParallelHead, AShortLastChunkReducesItsTargetLogitsOnTheEmulatedCudaBackend) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  expect_split_matches_whole([]() -> std::unique_ptr<Backend> { return cuda_emu::make_emulated_cuda_backend(); });
}

}  // namespace
}  // namespace pipelane::cuda_test
