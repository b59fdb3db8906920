// Loader throughput for scripts/bench/data_throughput.sh: opens a token file the way training does
// and times ShardedSampler::next_batch.  bench_loader FILE [seq_len=128] [batch=8] [seconds=2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "datasets/data_error.h"
#include "datasets/sharded_sampler.h"

int main(int argc, char** argv) {
  using namespace pipelane;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_loader FILE [seq_len] [batch] [seconds]\n");
    return 2;
  }
  try {
    const int T = argc > 2 ? std::atoi(argv[2]) : 128, B = argc > 3 ? std::atoi(argv[3]) : 8;
    const double budget = argc > 4 ? std::atof(argv[4]) : 2.0;
    const auto t0 = std::chrono::steady_clock::now();
    const TokenStore store = TokenStore::open(argv[1]);
    const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ShardedSampler sampler(store.train(), {T, 1337, SampleMode::kCrossDocuments, 0, 1});
    std::vector<std::int32_t> in(static_cast<std::size_t>(B) * T), out(in.size());
    long samples = 0;
    const auto start = std::chrono::steady_clock::now();
    double secs = 0;
    while (secs < budget) {
      for (int i = 0; i < 100; ++i) sampler.next_batch(B, in.data(), out.data());
      samples += 100L * B;
      secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::printf("loader: %s opened in %.2f s; %.0f samples/s (seq_len %d, batch %d, %.1f epochs)\n", argv[1],
                open_s, samples / secs, T, B, static_cast<double>(samples) / sampler.samples_per_epoch());
  } catch (const DataError& e) {
    std::fprintf(stderr, "bench_loader: %s\n", e.what());
    return 1;
  }
}
