// Save on preemption (Megatron's --exit-signal-handler): SIGTERM or SIGUSR1 (Slurm's --signal)
// makes every rank finish the current step, write a checkpoint and exit with kExitCode, so a
// requeued job resumes where it stopped. The training loop asks after every step, and all ranks
// agree (one of them may have been signalled first).
//
// The signals are the trainer's own: blocked in the thread that constructs this (and so in every
// thread it starts later: lane threads, whose hosts block them again before each call) and taken
// by a thread of this object with sigtimedwait. Blocked signals are queued even when their action
// is "ignore", so an in-process lane that ignores, catches or resets SIGTERM cannot lose the
// checkpoint; that thread also puts the handler back every 50 ms, for threads that existed before
// (MPI's, OpenMP's) where the signals are not blocked.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <atomic>
#include <csignal>
#include <stdexcept>
#include <string>
#include <thread>

namespace pipelane {

class PreemptionSignal {
 public:
  static constexpr int kExitCode = 75;  // EX_TEMPFAIL: stopped on request, resume to continue

  // Installs the handlers for SIGTERM and SIGUSR1, blocks them here and starts the thread that
  // takes them; the destructor stops it and puts the previous handlers and mask back.
  PreemptionSignal();
  ~PreemptionSignal();
  PreemptionSignal(const PreemptionSignal&) = delete;
  PreemptionSignal& operator=(const PreemptionSignal&) = delete;

  // The signal received so far (0: none).
  int received() const;

 private:
  void take_signals();

  struct sigaction previous_term_ {};
  struct sigaction previous_usr1_ {};
  sigset_t previous_mask_{};
  std::atomic<bool> stop_{false};
  std::atomic<int> taken_{0};
  std::thread taker_;
};

// Thrown out of the training loop once the checkpoint after `step` is written.
class Preempted : public std::runtime_error {
 public:
  Preempted(int step, int signal, const std::string& checkpoint)
      : std::runtime_error("stopped by " + std::string(signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM") +
                           " after step " + std::to_string(step) + "; checkpoint " + checkpoint +
                           " written: run the same command again to resume"),
        step_(step) {}
  int step() const { return step_; }

 private:
  int step_;
};

}  // namespace pipelane
