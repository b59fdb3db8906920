#include "lanes/isolation/step_timer.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

namespace pipelane {
namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

long thread_involuntary_switches() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nivcsw;
}

}  // namespace

LaneStepCost charge_other_threads(LaneStepCost cost, double others_s, int threads) {
  const double own_wait = std::max(0.0, others_s - (std::max(1, threads) - 1) * cost.wall_s);
  cost.cpu_s += own_wait;
  if (cost.waiting_s >= 0) cost.waiting_s = std::max(0.0, cost.waiting_s - own_wait);
  return cost;
}

StepTimer::~StepTimer() {
  if (schedstat_fd_ >= 0) ::close(schedstat_fd_);
}

double StepTimer::run_queue_s() {
  if (schedstat_fd_ == -2) schedstat_fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (schedstat_fd_ < 0) return -1;
  // "<ns on the CPU> <ns waiting on a run queue> <time slices>"
  char text[96];
  const ssize_t n = ::pread(schedstat_fd_, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  char* end = nullptr;
  std::strtoull(text, &end, 10);
  const unsigned long long waiting_ns = std::strtoull(end, nullptr, 10);
  return 1e-9 * static_cast<double>(waiting_ns);
}

void StepTimer::start() {
  waiting0_ = run_queue_s();
  switches0_ = thread_involuntary_switches();
  cpu0_ = thread_cpu_s();
  wall0_ = std::chrono::steady_clock::now();
}

LaneStepCost StepTimer::stop() {
  LaneStepCost cost;
  cost.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count();
  cost.cpu_s = thread_cpu_s() - cpu0_;
  cost.involuntary_switches = thread_involuntary_switches() - switches0_;
  const double waiting = waiting0_ >= 0 ? run_queue_s() : -1;
  cost.waiting_s = waiting >= 0 ? waiting - waiting0_ : -1;
  return cost;
}

}  // namespace pipelane
