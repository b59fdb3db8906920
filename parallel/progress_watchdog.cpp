#include "parallel/progress_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace pipelane {

ProgressWatchdog::ProgressWatchdog(double timeout_s, std::string who, OnTimeout on_timeout)
    : timeout_s_(timeout_s), who_(std::move(who)), on_timeout_(std::move(on_timeout)),
      last_(Clock::now()) {
  if (!on_timeout_)
    on_timeout_ = [](const std::string& message) {
      std::fprintf(stderr, "pipelane: %s\n", message.c_str());
      std::fflush(stderr);
      std::_Exit(kExitCode);  // no unwinding: the main thread is stuck in a wait
    };
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

ProgressWatchdog::~ProgressWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressWatchdog::beat(std::string what, std::function<std::string()> detail) {
  std::lock_guard lock(mutex_);
  last_ = Clock::now();
  what_ = std::move(what);
  detail_ = std::move(detail);
}

void ProgressWatchdog::arm() {
  std::lock_guard lock(mutex_);
  armed_ = true;
  last_ = Clock::now();
}

void ProgressWatchdog::disarm() {
  std::lock_guard lock(mutex_);
  armed_ = false;
  detail_ = nullptr;
}

void ProgressWatchdog::watch() {
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 4, 0.05, 1.0));
  std::unique_lock lock(mutex_);
  Clock::time_point checked = Clock::now();
  while (!stopping_) {
    wake_.wait_for(lock, period);
    const Clock::time_point now = Clock::now();
    // This whole process was suspended (SIGSTOP, a frozen VM) if the watchdog itself overslept:
    // then the silence is not a wait on others, and the clock restarts.
    if (now - checked > 3 * period) last_ = now;
    checked = now;
    if (stopping_ || !armed_ || fired_) continue;
    const double idle = std::chrono::duration<double>(now - last_).count();
    if (idle < timeout_s_) continue;
    fired_ = true;
    char text[160];
    std::snprintf(text, sizeof text, "no progress for %.0f s ([run] timeout_s = %g)", idle, timeout_s_);
    std::string message = who_ + ": " + text + " while at " + what_;
    if (detail_) {
      const std::string more = detail_();
      if (!more.empty()) message += "; " + more;
    }
    message += "; stopping the job";
    lock.unlock();
    on_timeout_(message);
    lock.lock();
  }
}

}  // namespace pipelane
