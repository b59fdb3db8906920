#include <omp.h>
#include <xmmintrin.h>
#include <pmmintrin.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "runtime/device.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace pipelane {

void enable_flush_denormals_on_this_thread() {
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}

bool flush_denormals_enabled_on_this_thread() {
  return _MM_GET_FLUSH_ZERO_MODE() == _MM_FLUSH_ZERO_ON &&
         _MM_GET_DENORMALS_ZERO_MODE() == _MM_DENORMALS_ZERO_ON;
}

namespace {

class CpuStream final : public Stream {
 public:
  explicit CpuStream(StreamPriority p) : priority_(p) {}
  StreamPriority priority() const override { return priority_; }
  void synchronize() override {}

 private:
  StreamPriority priority_;
};

class CpuEvent final : public Event {
 public:
  void record(Stream&) override {
    at_ = std::chrono::steady_clock::now();
    recorded_ = true;
  }
  bool query() const override { return recorded_; }
  void synchronize() override {}
  double elapsed_ms_since(const Event& earlier) const override {
    const auto* e = dynamic_cast<const CpuEvent*>(&earlier);
    if (!e || !e->recorded_ || !recorded_)
      throw std::logic_error("CpuEvent::elapsed_ms_since: both events must be recorded CPU events");
    return std::chrono::duration<double, std::milli>(at_ - e->at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_{};
  bool recorded_ = false;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads) : threads_(threads > 0 ? threads : default_threads()) {
    omp_set_num_threads(threads_);
    openblas_set_num_threads(threads_);
    enable_flush_denormals_on_this_thread();
#pragma omp parallel num_threads(threads_)
    enable_flush_denormals_on_this_thread();
  }
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu (" + std::to_string(threads_) + " threads)"; }
  int threads() const override { return threads_; }
  std::unique_ptr<Stream> create_stream(StreamPriority p) override {
    return std::make_unique<CpuStream>(p);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }

 private:
  static int default_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n ? static_cast<int>(n) : 1;
  }
  int threads_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) { return std::make_unique<CpuDevice>(threads); }

}  // namespace pipelane
