// Backends by name. `[runtime] backend = cpu | cuda | cuda:N` names one; `pipelane devices` lists
// what each registered backend can see. The registry is an object (no process-wide table): the
// trainer builds one with the built-in backends and asks it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace pipelane {

struct BackendOptions {
  int threads = 0;            // CPU worker threads (0: all cores)
  int device_index = 0;       // "cuda:N"
  int lane_sm_partition = 0;  // CUDA: [lanes] sm_partition (SMs of the lanes' green context)
  DType compute = DType::F32;  // F32 or BF16 (autocast-style GEMM operands: runtime/backend.h)
  bool cudnn_attention = false;  // CUDA: [model] attention = cudnn (cuDNN's fused attention graphs)
};

// What one backend can see on this machine, for `pipelane devices`.
struct BackendDevices {
  std::string backend;                // "cpu", "cuda"
  bool available = false;
  std::string reason;                 // why not, when unavailable (one line)
  std::vector<std::string> devices;   // one line per device
};

// A backend name could not be had here (unknown name, not built, no device). what() is one line.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Device buffers between ranks, for a backend whose memory the MPI data planes cannot move: NCCL
// communicators made by the CUDA backend library. Peers are integers here; which ranks form a
// group and what travels between them is the caller's (parallel/). Every call is enqueued on
// `stream` and returns without waiting; a send or receive holds its stream until the peer's
// matching call runs, so each point-to-point link wants a stream of its own.
class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(const void* data, std::size_t bytes, int peer, Stream& stream) = 0;
  virtual void recv(void* data, std::size_t bytes, int peer, Stream& stream) = 0;
  // In place, element-wise; every rank gets the same bits.
  virtual void all_reduce_sum(float* data, std::size_t n, Stream& stream) = 0;
  virtual void all_reduce_max(float* data, std::size_t n, Stream& stream) = 0;
  virtual void all_gather(const float* in, float* out, std::size_t n, Stream& stream) = 0;
  // In place (NCCL's convention): `data` holds size() blocks of n floats; block rank() of the sum
  // lands at data + rank() * n, the other blocks are undefined.
  virtual void reduce_scatter_sum(float* data, std::size_t n, Stream& stream) = 0;
};

struct DeviceCommSpec {
  std::vector<char> id;  // from cuda_comm_unique_id(), made once and handed to every member
  int size = 1;
  int rank = 0;
};

// The CUDA backend library's communicators (BackendUnavailable when the library cannot be had,
// std::runtime_error with one line when NCCL refuses). create_cuda_comms makes all of a rank's
// communicators at once, on device `device`.
std::vector<char> cuda_comm_unique_id();
std::vector<std::unique_ptr<DeviceComm>> create_cuda_comms(const std::vector<DeviceCommSpec>& specs, int device);

class BackendRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Backend>(const BackendOptions&)>;
  using Lister = std::function<BackendDevices()>;

  // cpu, and cuda when this build has it (the CUDA backend is a library loaded on demand, so
  // CPU-only runs never load the CUDA libraries).
  static BackendRegistry with_builtins();

  void add(std::string name, Factory factory, Lister lister);
  // "cpu", "cuda", "cuda:1". BackendUnavailable naming the spec and the reason.
  std::unique_ptr<Backend> create(const std::string& spec, BackendOptions options = {}) const;
  std::vector<BackendDevices> devices() const;
  std::vector<std::string> names() const;

 private:
  struct Entry {
    std::string name;
    Factory factory;
    Lister lister;
  };
  std::vector<Entry> entries_;
};

}  // namespace pipelane
