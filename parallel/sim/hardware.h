// Devices and links the simulator prices a job on: a built-in table (overridable from a cluster
// file) and the time a link takes to move bytes.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace pipelane::sim {

enum class Precision { Bf16, Fp32 };  // which peak the model's matmuls run at

struct DeviceSpec {
  std::string name;         // "h100"
  std::string description;  // "NVIDIA H100 SXM5 80 GB"
  double peak_bf16_flops = 0;  // dense FLOP/s
  double peak_fp32_flops = 0;
  double memory_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s (the optimizer step is bound by it)
  double price_per_hour = 0;    // $ per device-hour
  double efficiency = 0.5;      // share of the peak the model's matmuls reach
  Precision precision = Precision::Bf16;
  std::string price_source;     // where the price comes from (shown in reports)

  double peak_flops() const { return precision == Precision::Bf16 ? peak_bf16_flops : peak_fp32_flops; }
  double achieved_flops() const { return peak_flops() * efficiency; }
  // Bytes of one stage-to-stage message element: 2 in bf16 (pipelane stores and sends them in bf16
  // there), 4 in fp32. Tensor- and data-parallel collectives are fp32 either way (job_costs.cpp).
  int element_bytes() const { return precision == Precision::Bf16 ? 2 : 4; }
};

struct LinkSpec {
  std::string name;
  std::string description;
  double latency_s = 0;
  double bandwidth = 0;   // bytes/s of one connection
  int connections = 1;    // parallel connections one transfer is striped over
  double capacity = 0;    // bytes/s of the whole link; 0: no cap beyond connections x bandwidth
  // Messages larger than this go by rendezvous (MPI's protocol for large messages: the sender's
  // request waits for the receive to be posted, then a round trip before the bytes flow); 0: every
  // message is sent at once. Charged on cross-site transfers (where the latency makes it count).
  double rendezvous_above_bytes = 0;

  // What one transfer gets: connections x bandwidth, capped by the link's capacity.
  double effective_bandwidth() const;
  // Latency plus bytes at the effective bandwidth.
  double transfer_s(double bytes) const;
};

// Built-ins: cpu (one core of this machine: fp32; its peak is 0 until measured, see
// measured_cpu_device), a100, h100, h200, rtx6000ada, rtx3080.
const std::vector<DeviceSpec>& builtin_devices();
std::optional<DeviceSpec> builtin_device(const std::string& name);
// Built-ins: shm (MPI through shared memory on one host), pcie4, pcie5, nvlink3, nvlink4,
// ib-hdr, ib-ndr, eth-10g, eth-100g, wan.
const std::vector<LinkSpec>& builtin_links();
std::optional<LinkSpec> builtin_link(const std::string& name);
std::string builtin_device_names();  // "cpu, a100, ..." for messages
std::string builtin_link_names();

// The built-in cpu entry with its fp32 peak measured now (one thread, a short sgemm): one core of
// this machine, as `pipelane train` measures its peak.
DeviceSpec measured_cpu_device();

}  // namespace pipelane::sim
