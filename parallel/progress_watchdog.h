// No silent hang: a rank that makes no progress for timeout_s ends the job with one line naming
// what it was waiting for (the instruction and, for a transfer, the peer rank). The executor
// reports each instruction it starts (beat); a watchdog thread checks the time since the last
// one. Blocking MPI collectives cannot time out by themselves, so the watchdog is what ends them;
// under mpirun one rank's exit takes the whole job down.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace pipelane {

class ProgressWatchdog {
 public:
  // Called (on the watchdog's thread) once the timeout passes; the default prints `message` to
  // stderr and ends the process with kExitCode.
  using OnTimeout = std::function<void(const std::string& message)>;
  static constexpr int kExitCode = 4;

  // `who` names this rank in the message ("rank 1 (tp0 dp0 pp1)").
  ProgressWatchdog(double timeout_s, std::string who, OnTimeout on_timeout = {});
  ~ProgressWatchdog();
  ProgressWatchdog(const ProgressWatchdog&) = delete;
  ProgressWatchdog& operator=(const ProgressWatchdog&) = delete;

  // Progress: `what` is where the rank is now (shown if it stays there too long). `detail`, when
  // given, is asked at that moment for more (e.g. which ranks a barrier still waits for); it runs
  // on the watchdog's thread and must only read thread-safe state. It must stay callable until
  // the next beat or disarm.
  void beat(std::string what, std::function<std::string()> detail = {});
  // Only armed periods are watched (a long checkpoint write between steps is not a hang).
  void arm();
  void disarm();
  double timeout_s() const { return timeout_s_; }

 private:
  void watch();
  using Clock = std::chrono::steady_clock;
  const double timeout_s_;
  const std::string who_;
  OnTimeout on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool armed_ = false, stopping_ = false, fired_ = false;
  Clock::time_point last_;
  std::string what_ = "starting";
  std::function<std::string()> detail_;
  std::thread thread_;
};

}  // namespace pipelane
