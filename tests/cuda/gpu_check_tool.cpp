// The measurements of scripts/gpu_check.sh that need the real CUDA backend on a GPU, one
// subcommand each, one JSON object on stdout (the script puts them into its report). Linked
// against the CUDA backend library itself (not loaded through the registry), so it can use the
// backend's own interface: bf16 ops, pool arenas, lane SM partitions. Without a GPU every
// subcommand prints {"status": "no device", ...} and exits 3.
//
//   gpu_check_tool env
//   gpu_check_tool gemm-peak N [DATASHEET_TFLOPS]   fp32 and bf16 cuBLASLt GEMMs of N^3, random inputs, median of 7
//   gpu_check_tool train-parity                     tiny GPT, 5 steps: CUDA vs CPU backend, fp32 and bf16
//   gpu_check_tool lanes MODE STEPS                 MODE: off | equal | low | partition:SMS
//   gpu_check_tool lane-block SAMPLES               training's probe kernels with a lane kernel resident vs alone (lane_block_probe.h)
//   gpu_check_tool pool-quota                       a pool arena past its maxSize is refused
//   gpu_check_tool make-data PATH TOKENS VOCAB      a synthetic gpt2-tokenized token store
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/token_store.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/backend/cublaslt_engine.h"
#include "runtime/cuda/backend/cuda_memory.h"
#include "runtime/cuda/cuda_backend.h"
#include "tests/cuda/executor_runs.h"
#include "tests/cuda/lane_block_probe.h"

namespace pipelane::cuda_test {
namespace {

using json = nlohmann::json;

int emit(const json& j, int code = 0) {
  std::cout << j.dump() << std::endl;
  return code;
}

std::unique_ptr<cuda::CudaBackend> real_backend(int sm_partition = 0, DType compute = DType::F32) {
  cuda::CudaBackendConfig config;
  config.lane_sm_partition = sm_partition;
  config.compute = compute;
  return cuda::make_cuda_backend(config, cuda::make_cublaslt_engine());
}

int env() {
  int count = 0, driver = 0, runtime = 0;
  cudaGetDeviceCount(&count);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int least = 0, greatest = 0, clock_khz = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  std::size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  const auto backend = real_backend();
  return emit({{"status", "ok"}, {"devices", count}, {"name", prop.name}, {"sms", prop.multiProcessorCount},
               {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
               {"memory_gib", total / double(1u << 30)}, {"sm_clock_mhz", clock_khz / 1000.0},
               {"driver", driver}, {"runtime", runtime}, {"priority_greatest", greatest}, {"priority_least", least},
               {"backend", backend->name()}});
}

// The median of `reps` timed GEMMs after a warm-up, in TFLOP/s (the best of a few would flatter:
// clocks and the L2 vary run to run), with the slowest and fastest beside it.
template <typename Run>
json median_tflops(Backend& backend, Stream& s, double flops, int reps, Run run) {
  run();
  auto start = backend.create_event(), end = backend.create_event();
  std::vector<double> tflops;
  for (int r = 0; r < reps; ++r) {
    start->record(s);
    run();
    end->record(s);
    end->synchronize();
    tflops.push_back(flops / (end->elapsed_ms_since(*start) * 1e-3) / 1e12);
  }
  std::sort(tflops.begin(), tflops.end());
  return {{"median", tflops[tflops.size() / 2]}, {"min", tflops.front()}, {"max", tflops.back()}, {"reps", reps}};
}

// Uniform [-1, 1) values: zeros (what a fresh arena holds) run ~12% faster on an H200 (less
// switching in the multipliers) and would overstate the peak.
template <typename T, typename Convert>
void upload_random(Backend& backend, Stream& s, T* device, std::size_t n, unsigned seed, Convert convert) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<T> host(n);
  for (T& x : host) x = convert(d(rng));
  backend.copy(device, host.data(), n * sizeof(T), s);
  s.synchronize();
}

// fp32 and bf16 cuBLASLt GEMMs of n^3 on random inputs, median of 7, beside the datasheet's dense
// bf16 peak (989 TFLOP/s for an H100/H200 SXM unless the caller says otherwise).
int gemm_peak(int n, double datasheet_bf16_tflops) {
  const auto backend = real_backend();
  auto s = backend->create_stream(StreamPriority::High);
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  auto arena = backend->create_arena("gemm", 3 * nn * sizeof(float) + (1 << 20));
  float *a = arena->allocate_n<float>(nn), *b = arena->allocate_n<float>(nn), *c = arena->allocate_n<float>(nn);
  const double flops = 2.0 * n * nn;
  const auto as_float = [](float x) { return x; };
  upload_random(*backend, *s, a, nn, 1, as_float);
  upload_random(*backend, *s, b, nn, 2, as_float);
  const json fp32 = median_tflops(*backend, *s, flops, 7, [&] { backend->matmul_forward(c, a, b, nullptr, n, n, n, *s); });
  auto* ha = reinterpret_cast<__nv_bfloat16*>(a);
  auto* hb = reinterpret_cast<__nv_bfloat16*>(b);
  auto* hc = reinterpret_cast<__nv_bfloat16*>(c);
  const auto as_bf16 = [](float x) { return __float2bfloat16(x); };
  upload_random(*backend, *s, ha, nn, 3, as_bf16);
  upload_random(*backend, *s, hb, nn, 4, as_bf16);
  const json bf16 = median_tflops(*backend, *s, flops, 7, [&] {
    backend->bf16_ops().matmul_forward(hc, ha, hb, nullptr, n, n, n, *s);
  });
  const double bf16_median = bf16["median"];
  return emit({{"status", "ok"}, {"n", n}, {"inputs", "uniform [-1, 1)"}, {"fp32_tflops", fp32["median"]},
               {"bf16_tflops", bf16_median}, {"fp32", fp32}, {"bf16", bf16},
               {"datasheet_dense_bf16_tflops", datasheet_bf16_tflops},
               {"bf16_fraction_of_datasheet", bf16_median / datasheet_bf16_tflops}});
}

json runs_json(const TrainRun& r) { return {{"loss", r.loss}, {"grad_norm", r.grad_norm}, {"step_s", r.step_s}}; }

// fp32: CUDA vs CPU within 1e-5 relative. bf16 compute (autocast style): CUDA's losses within 0.05
// of the CPU's fp32 run, and within the bound of tests/cuda/test_cuda_autocast.cpp of the CPU's
// bf16 emulation (1e-5 relative + 0.25 x the largest bf16-vs-fp32 difference on the CPU).
int train_parity() {
  const auto train = [](Backend& backend) {
    Topology topo = Topology::single_process(backend);
    return train_steps(topo, backend, tiny_gpt(), 1, 2, 8, 2, 5);
  };
  const auto cpu = make_cpu_backend(0), cpu_bf16 = make_cpu_backend(0, DType::BF16);
  const auto cuda = real_backend(), cuda_bf16 = real_backend(0, DType::BF16);
  const TrainRun want = train(*cpu), got = train(*cuda);
  const TrainRun want_bf16 = train(*cpu_bf16), got_bf16 = train(*cuda_bf16);
  double worst = 0;
  for (std::size_t i = 0; i < want.loss.size(); ++i) {
    worst = std::max(worst, std::abs(got.loss[i] - want.loss[i]) / want.loss[i]);
    worst = std::max(worst, std::abs(got.grad_norm[i] - want.grad_norm[i]) / want.grad_norm[i]);
  }
  const double vs_fp32 = largest_difference(got_bf16.loss, want.loss);
  const double vs_cpu_bf16 = largest_difference(got_bf16.loss, want_bf16.loss);
  const double cpu_bf16_effect = largest_difference(want_bf16.loss, want.loss);
  const double limit_vs_cpu_bf16 = 1e-5 * want_bf16.loss.front() + 0.25 * cpu_bf16_effect;
  bool bf16_finite = true;
  for (double l : got_bf16.loss) bf16_finite = bf16_finite && std::isfinite(l);
  const bool pass = worst <= 1e-5 && bf16_finite && vs_fp32 <= 0.05 && vs_cpu_bf16 <= limit_vs_cpu_bf16;
  return emit({{"status", pass ? "pass" : "fail"}, {"max_relative_difference", worst}, {"limit", 1e-5},
               {"cpu", runs_json(want)}, {"cuda", runs_json(got)},
               {"bf16",
                {{"max_loss_difference_vs_cpu_fp32", vs_fp32}, {"limit_vs_cpu_fp32", 0.05},
                 {"max_loss_difference_vs_cpu_bf16", vs_cpu_bf16}, {"limit_vs_cpu_bf16", limit_vs_cpu_bf16},
                 {"cpu", runs_json(want_bf16)}, {"cuda", runs_json(got_bf16)}}}});
}

// A GPT that keeps an H200 busy for ~100 ms a step, trained while a lane thread runs bounded
// steps (one 2048^3 fp32 GEMM and one wait each, as the gap scheduler's steps) on a stream of the
// mode's priority; off: no lane.
int lanes(const std::string& mode, int steps) {
  const int partition = mode.rfind("partition:", 0) == 0 ? std::stoi(mode.substr(10)) : 0;
  const auto cuda = real_backend(partition);
  const GptConfig model = gpt(8, 1024, 16, 1024, 50304);
  std::atomic<bool> stop{false};
  std::atomic<long> lane_steps{0};
  std::thread lane;
  if (mode != "off")
    lane = std::thread([&] {
      auto stream = cuda->create_stream(mode == "equal" ? StreamPriority::High : StreamPriority::Low);
      const int n = 2048;
      const std::size_t nn = static_cast<std::size_t>(n) * n;
      auto arena = cuda->create_pool_arena("lane", 3 * nn * sizeof(float) + (4 << 20));
      float *a = arena->allocate_n<float>(nn), *b = arena->allocate_n<float>(nn), *c = arena->allocate_n<float>(nn);
      auto done = cuda->create_event();
      while (!stop.load()) {
        cuda->matmul_forward(c, a, b, nullptr, n, n, n, *stream);
        done->record(*stream);
        done->synchronize();
        lane_steps.fetch_add(1);
      }
    });
  Topology topo = Topology::single_process(*cuda);
  const TrainRun run = train_steps(topo, *cuda, model, 1, 4, 1024, 2, steps);
  stop.store(true);
  if (lane.joinable()) lane.join();
  std::vector<double> tail(run.step_s.begin() + std::min<std::size_t>(2, run.step_s.size()), run.step_s.end());
  std::sort(tail.begin(), tail.end());
  const double median = tail.empty() ? 0 : tail[tail.size() / 2];
  return emit({{"status", "ok"}, {"mode", mode}, {"lane_steps", lane_steps.load()},
               {"partition_sms", cuda->stats().lane_partition_sms}, {"median_step_s", median},
               {"run", runs_json(run)}});
}

// The simulator's interference parameter per lane kind (lane_block_probe.h): for each probe kind,
// the probes alone and with each lane kind resident; delay = the medians' difference, which a
// gap's end costs training's next kernel, and kernel_block_ms = twice it (the simulator's lanes
// file key: training waits half a resident block).
int lane_block(int samples) {
  const auto cuda = real_backend();
  LaneBlockSizes sizes;
  sizes.samples = samples;
  json probes = json::object();
  unsigned seed = 1;
  for (const std::string probe : {"gemm", "stream"}) {
    const LaneBlockSeries alone = measure_lane_block(*cuda, "none", probe, sizes, seed++);
    json lanes = json::object();
    for (const std::string lane : {"gemm", "stream"}) {
      const LaneBlockSeries with = measure_lane_block(*cuda, lane, probe, sizes, seed++);
      const double delay = with.median_ms() - alone.median_ms();
      lanes[lane] = {{"median_ms", with.median_ms()}, {"p90_ms", with.p90_ms()}, {"lane_kernels", with.lane_kernels},
                     {"delay_ms", delay}, {"slowdown", alone.median_ms() > 0 ? delay / alone.median_ms() : 0.0},
                     {"kernel_block_ms", std::max(0.0, 2 * delay)}};
    }
    probes[probe] = {{"alone_median_ms", alone.median_ms()}, {"alone_p90_ms", alone.p90_ms()}, {"with_lane", lanes}};
  }
  return emit({{"status", "ok"}, {"samples", samples}, {"lane_gemm_n", sizes.lane_gemm_n},
               {"lane_stream_floats", sizes.lane_stream_floats}, {"probe_gemm_n", sizes.probe_gemm_n},
               {"probe_stream_floats", sizes.probe_stream_floats}, {"probes", probes}});
}

int pool_quota() {
  const auto cuda = real_backend();
  json out = {{"status", "fail"}};
  auto lane = cuda->create_pool_arena("lane", 64 << 20);
  lane->allocate(64 << 20);
  try {
    lane->allocate(1);
    out["arena_quota"] = "not refused";
  } catch (const ArenaQuotaError& e) {
    out["arena_quota"] = e.what();
  }
  cuda::PoolMemory pool(0, 64 << 20);  // maxSize 64 MiB
  try {
    Arena over("over the pool", std::size_t{128} << 20, pool);
    out["pool_max_size"] = "not refused";
  } catch (const ArenaQuotaError& e) {
    out["pool_max_size"] = e.what();
    if (out["arena_quota"] != "not refused") out["status"] = "pass";
  }
  return emit(out);
}

int make_data(const std::string& path, std::size_t tokens, int vocab) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  TokenSplit train, valid;
  train.doc_offsets = {0};
  for (std::size_t i = 0; i < tokens; ++i) train.tokens.push_back(static_cast<std::uint16_t>(d(rng)));
  train.doc_offsets.push_back(train.tokens.size());
  valid.doc_offsets = {0};
  for (std::size_t i = 0; i < tokens / 10 + 2048; ++i) valid.tokens.push_back(static_cast<std::uint16_t>(d(rng)));
  valid.doc_offsets.push_back(valid.tokens.size());
  write_token_store(path, {"gpt2", static_cast<std::uint32_t>(vocab), {"synthetic"}}, train, valid);
  return emit({{"status", "ok"}, {"path", path}, {"tokens", tokens}});
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "make-data" && argc == 5) return make_data(argv[2], std::stoull(argv[3]), std::stoi(argv[4]));
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0)
    return emit({{"status", "no device"}, {"reason", status != cudaSuccess ? cudaGetErrorString(status) : "none"}}, 3);
  if (cmd == "env") return env();
  if (cmd == "gemm-peak" && (argc == 3 || argc == 4))
    return gemm_peak(std::stoi(argv[2]), argc == 4 ? std::stod(argv[3]) : 989.0);
  if (cmd == "train-parity") return train_parity();
  if (cmd == "lanes" && argc == 4) return lanes(argv[2], std::stoi(argv[3]));
  if (cmd == "lane-block" && argc == 3) return lane_block(std::stoi(argv[2]));
  if (cmd == "pool-quota") return pool_quota();
  std::cerr << "usage: gpu_check_tool env | gemm-peak N [DATASHEET_TFLOPS] | train-parity | lanes off|equal|low|partition:SMS STEPS | lane-block SAMPLES | "
               "pool-quota | make-data PATH TOKENS VOCAB\n";
  return 2;
}

}  // namespace
}  // namespace pipelane::cuda_test

int main(int argc, char** argv) {
  try {
    return pipelane::cuda_test::run(argc, argv);
  } catch (const std::exception& e) {
    return pipelane::cuda_test::emit({{"status", "error"}, {"error", e.what()}}, 1);
  }
}
