#include "runtime/backend_registry.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda_backend_abi.h"

namespace pipelane {

namespace {

BackendDevices cpu_devices() {
  BackendDevices d;
  d.backend = "cpu";
  d.available = true;
  const auto backend = make_cpu_backend(0);
  // bf16 GEMMs take one of two paths (runtime/cpu/cpu_backend.h); say which one a run would get.
  std::string bf16;
  try {
    bf16 = describe_cpu_bf16_gemm();
  } catch (const std::exception& e) {
    bf16 = e.what();
  }
  d.devices.push_back(backend->name() + "; [train] precision = bf16: " + bf16);
  return d;
}

// The CUDA backend lives in its own shared library, loaded only when asked for: linking
// cuBLASLt, cuDNN and NCCL costs every process ~60 ms and ~200 MB, which CPU runs must not pay.
// It is looked up in $PIPELANE_BACKEND_DIR, then beside the running executable.
std::string cuda_library_path() {
  if (const char* dir = std::getenv("PIPELANE_BACKEND_DIR"); dir && *dir)
    return (std::filesystem::path(dir) / kCudaBackendLibrary).string();
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return kCudaBackendLibrary;
  return (exe.parent_path() / kCudaBackendLibrary).string();
}

// The library's entry points, or a one-line reason why it cannot be had. The handle is kept for
// the life of the process: backends made by it must never outlive their code.
struct CudaLibrary {
  CudaBackendAbiVersionFn abi_version = nullptr;
  CudaBackendCreateFn create = nullptr;
  CudaBackendDevicesFn devices = nullptr;
  CudaCommUniqueIdFn comm_unique_id = nullptr;
  CudaCommsCreateFn comms_create = nullptr;
  std::string error;
};

CudaLibrary open_cuda_library() {
  CudaLibrary lib;
  const std::string path = cuda_library_path();
  if (!std::filesystem::exists(path)) {
    lib.error = "this build has no CUDA backend (" + path +
                " not found: build where nvcc is installed, or set PIPELANE_BACKEND_DIR)";
    return lib;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    lib.error = std::string("cannot load the CUDA backend: ") + dlerror();
    return lib;
  }
  lib.abi_version = reinterpret_cast<CudaBackendAbiVersionFn>(dlsym(handle, kCudaBackendAbiVersionSymbol));
  lib.create = reinterpret_cast<CudaBackendCreateFn>(dlsym(handle, kCudaBackendCreateSymbol));
  lib.devices = reinterpret_cast<CudaBackendDevicesFn>(dlsym(handle, kCudaBackendDevicesSymbol));
  lib.comm_unique_id = reinterpret_cast<CudaCommUniqueIdFn>(dlsym(handle, kCudaCommUniqueIdSymbol));
  lib.comms_create = reinterpret_cast<CudaCommsCreateFn>(dlsym(handle, kCudaCommsCreateSymbol));
  if (!lib.abi_version || !lib.create || !lib.devices || !lib.comm_unique_id || !lib.comms_create)
    lib.error = path + " does not export the CUDA backend entry points";
  else if (lib.abi_version() != kCudaBackendAbiVersion)
    lib.error = path + " is from another build (ABI " + std::to_string(lib.abi_version()) + ", expected " +
                std::to_string(kCudaBackendAbiVersion) + "): rebuild it with this pipelane";
  return lib;
}

BackendDevices cuda_devices() {
  BackendDevices d;
  d.backend = "cuda";
  const CudaLibrary lib = open_cuda_library();
  if (!lib.error.empty()) {
    d.reason = lib.error;
    return d;
  }
  char text[4096] = {0};
  const int count = lib.devices(text, sizeof text);
  if (count <= 0) {
    d.reason = text[0] ? text : "no CUDA device";
    return d;
  }
  d.available = true;
  std::string lines = text;
  for (std::size_t at = 0; at < lines.size();) {
    const std::size_t end = lines.find('\n', at);
    d.devices.push_back(lines.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return d;
}

std::unique_ptr<Backend> create_cuda(const BackendOptions& options) {
  const CudaLibrary lib = open_cuda_library();
  if (!lib.error.empty()) throw BackendUnavailable("backend cuda: " + lib.error);
  char error[1024] = {0};
  CudaBackendCreateOptions o;
  o.device_index = options.device_index;
  o.lane_sm_partition = options.lane_sm_partition;
  o.compute_bf16 = options.compute == DType::BF16 ? 1 : 0;
  o.cudnn_attention = options.cudnn_attention ? 1 : 0;
  Backend* backend = lib.create(&o, error, sizeof error);
  if (!backend)
    throw BackendUnavailable("backend cuda:" + std::to_string(options.device_index) + ": " +
                             (error[0] ? error : "could not be created"));
  return std::unique_ptr<Backend>(backend);
}

CudaLibrary cuda_library_or_throw(const char* what) {
  CudaLibrary lib = open_cuda_library();
  if (!lib.error.empty()) throw BackendUnavailable(std::string(what) + ": " + lib.error);
  return lib;
}

}  // namespace

std::vector<char> cuda_comm_unique_id() {
  const CudaLibrary lib = cuda_library_or_throw("NCCL unique id");
  char id[512] = {0}, error[1024] = {0};
  const int n = lib.comm_unique_id(id, sizeof id, error, sizeof error);
  if (n < 0) throw std::runtime_error(std::string("NCCL unique id: ") + error);
  return std::vector<char>(id, id + n);
}

std::vector<std::unique_ptr<DeviceComm>> create_cuda_comms(const std::vector<DeviceCommSpec>& specs, int device) {
  const CudaLibrary lib = cuda_library_or_throw("NCCL communicators");
  std::vector<CudaCommSpec> abi;
  for (const DeviceCommSpec& s : specs) abi.push_back({s.id.data(), s.id.size(), s.size, s.rank});
  std::vector<DeviceComm*> made(specs.size(), nullptr);
  char error[1024] = {0};
  if (lib.comms_create(abi.data(), static_cast<int>(abi.size()), device, made.data(), error, sizeof error) != 0)
    throw std::runtime_error(std::string("NCCL communicators: ") + error);
  std::vector<std::unique_ptr<DeviceComm>> out;
  for (DeviceComm* c : made) out.emplace_back(c);
  return out;
}

BackendRegistry BackendRegistry::with_builtins() {
  BackendRegistry r;
  r.add("cpu", [](const BackendOptions& o) { return make_cpu_backend(o.threads, o.compute); }, cpu_devices);
  r.add("cuda", create_cuda, cuda_devices);
  return r;
}

void BackendRegistry::add(std::string name, Factory factory, Lister lister) {
  entries_.push_back({std::move(name), std::move(factory), std::move(lister)});
}

std::unique_ptr<Backend> BackendRegistry::create(const std::string& spec,
                                                 BackendOptions options) const {
  std::string name = spec;
  if (const std::size_t colon = spec.find(':'); colon != std::string::npos) {
    name = spec.substr(0, colon);
    const std::string index = spec.substr(colon + 1);
    char* end = nullptr;
    const long value = std::strtol(index.c_str(), &end, 10);
    if (index.empty() || *end != '\0' || value < 0 || value > 1024)
      throw BackendUnavailable("backend '" + spec + "': expected NAME or NAME:INDEX (e.g. cuda:0)");
    options.device_index = static_cast<int>(value);
  }
  for (const Entry& e : entries_)
    if (e.name == name) return e.factory(options);
  std::string known;
  for (const Entry& e : entries_) known += (known.empty() ? "" : ", ") + e.name;
  throw BackendUnavailable("backend '" + spec + "': unknown (known: " + known + ")");
}

std::vector<BackendDevices> BackendRegistry::devices() const {
  std::vector<BackendDevices> out;
  for (const Entry& e : entries_) out.push_back(e.lister());
  return out;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

}  // namespace pipelane
