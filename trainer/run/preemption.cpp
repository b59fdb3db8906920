#include "trainer/run/preemption.h"

#include <pthread.h>

#include <cerrno>
#include <ctime>

namespace pipelane {

namespace {
// A signal handler can only reach process-wide state; this flag is the one piece of it, set by
// the handler (in a thread that does not block the signals) and read by the training loop.
volatile std::sig_atomic_t received_signal = 0;

extern "C" void record_preemption(int signal) { received_signal = signal; }

sigset_t training_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

void install_handler(struct sigaction* previous_term, struct sigaction* previous_usr1) {
  struct sigaction action {};
  action.sa_handler = record_preemption;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls resume; the loop checks between steps
  sigaction(SIGTERM, &action, previous_term);
  sigaction(SIGUSR1, &action, previous_usr1);
}
}  // namespace

PreemptionSignal::PreemptionSignal() {
  received_signal = 0;
  install_handler(&previous_term_, &previous_usr1_);
  const sigset_t set = training_signals();
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
  taker_ = std::thread(&PreemptionSignal::take_signals, this);
}

void PreemptionSignal::take_signals() {
  const sigset_t set = training_signals();
  const timespec period{0, 50 * 1000 * 1000};
  while (!stop_.load()) {
    const int signal = sigtimedwait(&set, nullptr, &period);
    if (signal > 0) taken_.store(signal);
    // A lane may have replaced the action: training's handler again, for the threads that do not
    // block the signals.
    struct sigaction current {};
    sigaction(SIGTERM, nullptr, &current);
    if (current.sa_handler != record_preemption) install_handler(nullptr, nullptr);
    sigaction(SIGUSR1, nullptr, &current);
    if (current.sa_handler != record_preemption) install_handler(nullptr, nullptr);
  }
}

PreemptionSignal::~PreemptionSignal() {
  stop_.store(true);
  if (taker_.joinable()) taker_.join();
  // A signal still queued (a second SIGTERM) is this run's too: taken here, not delivered to the
  // previous action once unblocked.
  const sigset_t set = training_signals();
  const timespec now{0, 0};
  while (sigtimedwait(&set, nullptr, &now) > 0) {
  }
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

int PreemptionSignal::received() const {
  const int taken = taken_.load();
  return taken ? taken : static_cast<int>(received_signal);
}

}  // namespace pipelane
