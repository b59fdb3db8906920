#include "trainer/run/machine_peak.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>


namespace pipelane {

namespace fs = std::filesystem;

namespace {

std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 1 + (line.size() > colon + 1 && line[colon + 1] == ' '));
    }
  return "";
}

double clock_ghz(std::string* source) {
  std::ifstream max_freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (max_freq >> khz && khz > 0) {
    *source = "cpufreq maximum";
    return khz / 1e6;
  }
  std::smatch m;
  const std::string model = cpuinfo_field("model name");
  if (std::regex_search(model, m, std::regex("([0-9]+\\.[0-9]+)\\s*GHz"))) {
    *source = "model name";
    return std::stod(m[1]);
  }
  const std::string mhz = cpuinfo_field("cpu MHz");
  if (!mhz.empty()) {
    *source = "cpu MHz";
    return std::round(std::atof(mhz.c_str())) / 1e3;
  }
  return 0;
}

}  // namespace

std::string sgemm_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = xdg && *xdg ? fs::path(xdg) : fs::path(home ? home : "/tmp") / ".cache";
  return (base / "pipelane" / "sgemm_peak.json").string();
}

std::string sgemm_cache_key(int threads, int ranks_on_host) {
  return cpuinfo_field("model name") + " | " + std::to_string(threads) + " threads | " + std::to_string(ranks_on_host) +
         " ranks on the host | n 1536";
}

CpuPeak cpu_hardware_peak(double cores) {
  int lanes = 4, fma = 1;
  std::string isa = "SSE";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    lanes = 16, fma = 2, isa = "AVX-512";
    if (__builtin_cpu_is("amd") && cpuinfo_field("cpu family") == "25") lanes = 8, isa = "AVX-512 on 256-bit pipes (Zen 4)";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    lanes = 8, fma = 2, isa = "AVX2 + FMA";
  }
  // Two pipes of the vector width; an FMA is a multiply and an add. SSE without FMA: one add
  // pipe and one multiply pipe, the same 2 FLOPs per lane per cycle.
  const int flops_per_cycle = lanes * 2 * (fma == 2 ? 2 : 1);
  std::string source;
  const double ghz = clock_ghz(&source);
  CpuPeak p;
  p.gflops = cores * ghz * flops_per_cycle;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.3g cores x %.2f GHz (%s) x %d FLOP/cycle (%s)", cores, ghz, source.c_str(),
                flops_per_cycle, isa.c_str());
  p.how = ghz > 0 ? buf : "clock unknown";
  return p;
}

namespace {

nlohmann::json read_cache(const std::string& path) {
  std::ifstream in(path);
  try {
    if (in) {
      nlohmann::json cache = nlohmann::json::parse(in);
      if (cache.is_object()) return cache;
    }
  } catch (const nlohmann::json::exception&) {  // a damaged cache is measured again
  }
  return nlohmann::json::object();
}

void write_cache(const std::string& path, const nlohmann::json& cache) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << cache.dump(2) << "\n";
  }
  fs::rename(tmp, path, ec);  // another rank writing at once is harmless
}

}  // namespace

MfuPeakChoice choose_mfu_peak(double given, const CpuPeak& hardware, std::optional<double> sgemm_gflops) {
  if (given > 0) return {given, "[train] peak_gflops", false};
  if (!sgemm_gflops || !(*sgemm_gflops > hardware.gflops) || hardware.gflops <= 0)
    return {hardware.gflops, "the hardware peak: " + hardware.how, false};
  char why[320];
  std::snprintf(why, sizeof why,
                "the measured sgemm, since the hardware peak (%.0f GFLOP/s: %s) is below it, so that figure's clock "
                "or vector width is wrong",
                hardware.gflops, hardware.how.c_str());
  return {*sgemm_gflops, why, true};
}

void forget_sgemm_peak(int threads, int ranks_on_host) {
  const std::string path = sgemm_cache_path();
  nlohmann::json cache = read_cache(path);
  if (cache.erase(sgemm_cache_key(threads, ranks_on_host)) > 0) write_cache(path, cache);
}

std::optional<SgemmPeak> sgemm_peak(int threads, int ranks_on_host, Backend* measure_on) {
  constexpr int kN = 1536;
  const std::string path = sgemm_cache_path();
  const std::string key = sgemm_cache_key(threads, ranks_on_host);
  nlohmann::json cache = read_cache(path);
  if (cache.contains(key) && cache[key].is_object() && cache[key].value("gflops", 0.0) > 0)
    return SgemmPeak{cache[key]["gflops"].get<double>(),
                     "measured sgemm, cached in " + path + " (" + cache[key].value("measured", std::string("?")) + ")"};
  if (!measure_on) return std::nullopt;
  // About a second of products (at least 8): the best one is what the BLAS reaches when it is not
  // disturbed, which a short start-up timing on a busy machine is not.
  double best = 0, spent = 0;
  for (int round = 0; round < 40 && (round < 8 || spent < 1.0); ++round) {
    const double g = measure_on->measure_matmul_gflops(kN, 1);
    best = std::max(best, g);
    spent += 2.0 * kN * kN * static_cast<double>(kN) / (g * 1e9) * 2;  // the call runs two products
  }
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", std::localtime(&now));
  cache[key] = {{"gflops", best}, {"measured", when}};
  write_cache(path, cache);
  return SgemmPeak{best, "measured sgemm (now), cached in " + path};
}

}  // namespace pipelane
