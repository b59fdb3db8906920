#include "parallel/sim/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "runtime/backend_registry.h"

namespace pipelane::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Dense peaks from the vendors' data sheets (no structured sparsity). Prices are illustrative
// on-demand rates per device-hour (a cluster file overrides them); FreeRide's two are the ones its
// artifact prices with.
std::vector<DeviceSpec> make_devices() {
  const auto gpu = [](const char* name, const char* description, double bf16_tflops, double fp32_tflops,
                      double memory_bytes, double bandwidth_gbs, double price, const char* price_source) {
    DeviceSpec d;
    d.name = name;
    d.description = description;
    d.peak_bf16_flops = bf16_tflops * 1e12;
    d.peak_fp32_flops = fp32_tflops * 1e12;
    d.memory_bytes = memory_bytes;
    d.memory_bandwidth = bandwidth_gbs * 1e9;
    d.price_per_hour = price;
    d.price_source = price_source;
    return d;
  };
  std::vector<DeviceSpec> devices;
  DeviceSpec cpu;
  cpu.name = "cpu";
  cpu.description = "one core of this machine (fp32; peak measured with a short sgemm)";
  cpu.precision = Precision::Fp32;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
  cpu.memory_bytes = pages > 0 && page > 0 ? static_cast<double>(pages) * page / std::max(1L, cores) : 4 * kGiB;
  cpu.memory_bandwidth = 10e9;
  cpu.price_per_hour = 0.04;
  cpu.price_source = "assumed: a cloud vCPU pair (one core) at about $0.04/h";
  devices.push_back(cpu);
  devices.push_back(gpu("a100", "NVIDIA A100 SXM4 80 GB", 312, 19.5, 80 * kGiB, 2039, 1.79,
                        "illustrative on-demand rate"));
  devices.push_back(gpu("h100", "NVIDIA H100 SXM5 80 GB", 989, 67, 80 * kGiB, 3350, 2.99,
                        "illustrative on-demand rate"));
  devices.push_back(gpu("h200", "NVIDIA H200 SXM 141 GB", 989, 67, 141e9, 4800, 3.79,
                        "illustrative on-demand rate"));
  devices.push_back(gpu("rtx6000ada", "NVIDIA RTX 6000 Ada 48 GB", 364, 91.1, 48 * kGiB, 960, 0.99,
                        "FreeRide's pricing: a 4-GPU server at $3.96/h"));
  devices.push_back(gpu("rtx3080", "NVIDIA GeForce RTX 3080 10 GB", 59.5, 29.8, 10 * kGiB, 760, 0.18,
                        "FreeRide's pricing of the dedicated side-task GPU"));
  return devices;
}

// Achievable rates (about 80-90% of nominal, what NCCL/MPI reach on large messages).
std::vector<LinkSpec> make_links() {
  const auto link = [](const char* name, const char* description, double latency_us, double gbs,
                       int connections, double capacity_gbs) {
    return LinkSpec{name, description, latency_us * 1e-6, gbs * 1e9, connections, capacity_gbs * 1e9};
  };
  return {
      link("shm", "MPI through shared memory on one host", 2, 8, 1, 0),
      link("pcie4", "PCIe 4.0 x16", 10, 25, 1, 0),
      link("pcie5", "PCIe 5.0 x16", 10, 50, 1, 0),
      link("nvlink3", "NVLink 3 (A100), per direction", 5, 240, 1, 0),
      link("nvlink4", "NVLink 4 (H100/H200), per direction", 5, 370, 1, 0),
      link("ib-hdr", "InfiniBand HDR 200 Gb/s, one NIC per GPU", 5, 23, 1, 0),
      link("ib-ndr", "InfiniBand NDR 400 Gb/s, one NIC per GPU", 5, 46, 1, 0),
      link("eth-10g", "10 Gb Ethernet", 50, 1.1, 1, 0),
      link("eth-100g", "100 Gb Ethernet (RoCE)", 20, 11, 1, 0),
      // One TCP stream across a WAN is window-limited far below the line rate: 1 Gb/s each,
      // several streams in parallel up to the 10 Gb/s line (ATLAS's point).
      link("wan", "wide-area link between data centres (10 Gb/s line, 1 Gb/s per TCP stream, 20 ms)",
           20000, 0.125, 1, 1.25),
  };
}

template <typename T>
std::optional<T> find_named(const std::vector<T>& table, const std::string& name) {
  for (const T& entry : table)
    if (entry.name == name) return entry;
  return std::nullopt;
}

template <typename T>
std::string names_of(const std::vector<T>& table) {
  std::string out;
  for (const T& entry : table) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

}  // namespace

double LinkSpec::effective_bandwidth() const {
  const double striped = std::max(1, connections) * bandwidth;
  return capacity > 0 ? std::min(striped, capacity) : striped;
}

double LinkSpec::transfer_s(double bytes) const {
  return bytes <= 0 ? 0.0 : latency_s + bytes / effective_bandwidth();
}

const std::vector<DeviceSpec>& builtin_devices() {
  static const std::vector<DeviceSpec> devices = make_devices();  // constant table, built once
  return devices;
}

std::optional<DeviceSpec> builtin_device(const std::string& name) { return find_named(builtin_devices(), name); }

const std::vector<LinkSpec>& builtin_links() {
  static const std::vector<LinkSpec> links = make_links();  // constant table, built once
  return links;
}

std::optional<LinkSpec> builtin_link(const std::string& name) { return find_named(builtin_links(), name); }
std::string builtin_device_names() { return names_of(builtin_devices()); }
std::string builtin_link_names() { return names_of(builtin_links()); }

DeviceSpec measured_cpu_device() {
  DeviceSpec cpu = *builtin_device("cpu");
  BackendOptions one_core;  // one core: one simulated device
  one_core.threads = 1;
  cpu.peak_fp32_flops = BackendRegistry::with_builtins().create("cpu", one_core)->measure_matmul_gflops(1024, 3) * 1e9;
  cpu.description += "; measured " + std::to_string(static_cast<int>(cpu.peak_fp32_flops / 1e9)) + " GFLOP/s";
  return cpu;
}

}  // namespace pipelane::sim
