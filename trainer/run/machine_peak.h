// The two peaks MFU is reported against, each named for what it is:
//  - the hardware's: cores x clock x fp32 FLOPs per cycle for the vector width the kernels use.
//    FLOPs per cycle assume two FMA pipes of that width (an FMA is 2 FLOPs): AVX-512 16 lanes ->
//    64, AVX2+FMA 8 lanes -> 32, SSE 4 lanes (separate add and multiply) -> 8. AMD Zen 4 (family
//    0x19) runs AVX-512 on 256-bit pipes, so it counts 32. The clock is the CPU's maximum from
//    cpufreq, else the GHz in the model name, else /proc/cpuinfo's "cpu MHz" (a VM's fixed clock).
//    It does not move from run to run, so MFU against it is reproducible.
//  - a measured sgemm (OpenBLAS, n = 1536, the rank's threads, repeated for about a second, the
//    best product kept): what the machine's BLAS actually reaches. Measured once per (CPU, threads,
//    ranks on the host) and cached in ${XDG_CACHE_HOME:-~/.cache}/pipelane/sgemm_peak.json, so
//    identical runs use the same number instead of a start-up timing that varies with load. A
//    run whose training outran the cached rate drops it (it was measured on a busy machine).
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include "runtime/backend.h"
#include <optional>
#include <string>

namespace pipelane {

struct CpuPeak {
  double gflops = 0;    // for `cores` cores
  std::string how;      // "2 cores x 2.60 GHz x 64 FLOP/cycle (AVX-512)"
};

// `cores` may be fractional (a rank's share of a host); 0 GFLOP/s when the clock is unknown.
CpuPeak cpu_hardware_peak(double cores);

struct SgemmPeak {
  double gflops = 0;
  std::string how;  // "measured sgemm, cached in PATH (2024-...)"
};

// The cache's key for this CPU: its model name, the threads and the ranks sharing the host.
std::string sgemm_cache_key(int threads, int ranks_on_host);
// The cache file: ${XDG_CACHE_HOME:-~/.cache}/pipelane/sgemm_peak.json.
std::string sgemm_cache_path();

// From the cache, else measured now and cached (measure = false: nullopt instead of measuring).
// `measure_on` (null: only read the cache) is the backend whose matmul is timed when nothing is
// cached; it must run `threads` threads.
std::optional<SgemmPeak> sgemm_peak(int threads, int ranks_on_host, Backend* measure_on);
// The one peak a run's MFU is against, and what it is. [train] peak_gflops when given (`given` >
// 0); else the hardware's, unless the measured sgemm beats it: no BLAS beats the hardware, so the
// hardware figure's clock (a VM's nominal "cpu MHz" below what it runs at) or its vector width is
// wrong, and MFU is against the measured sgemm instead, `source` saying so (issue #25: "peak 83
// GFLOP/s (the hardware peak)" was printed next to "measured sgemm 97 GFLOP/s").
struct MfuPeakChoice {
  double gflops = 0;
  std::string source;
  bool hardware_contradicted = false;  // the hardware peak was below the measured sgemm
};
MfuPeakChoice choose_mfu_peak(double given, const CpuPeak& hardware, std::optional<double> sgemm_gflops);

// Drops the cached entry: training went faster than it, so it was measured on a busy machine
// (the next run measures again).
void forget_sgemm_peak(int threads, int ranks_on_host);

}  // namespace pipelane
