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
