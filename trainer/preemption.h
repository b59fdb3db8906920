// Save on preemption (Megatron's --exit-signal-handler): SIGTERM or SIGUSR1 (Slurm's --signal)
// makes every rank finish the current step, write a checkpoint and exit with kExitCode, so a
// requeued job resumes where it stopped. The handler only records the signal; the training loop
// asks after every step, and all ranks agree (one of them may have been signalled first).
#pragma once
#include <csignal>
#include <stdexcept>
#include <string>

namespace pipelane {

class PreemptionSignal {
 public:
  static constexpr int kExitCode = 75;  // EX_TEMPFAIL: stopped on request, resume to continue

  // Installs the handlers for SIGTERM and SIGUSR1; the destructor puts the previous ones back.
  PreemptionSignal();
  ~PreemptionSignal();
  PreemptionSignal(const PreemptionSignal&) = delete;
  PreemptionSignal& operator=(const PreemptionSignal&) = delete;

  // The signal received so far (0: none).
  int received() const;

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_usr1_ {};
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
