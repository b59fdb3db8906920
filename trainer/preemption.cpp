#include "trainer/preemption.h"

namespace pipelane {

namespace {
// A signal handler can only reach process-wide state; this flag is the one piece of it, set by
// the handler and read by the training loop.
volatile std::sig_atomic_t received_signal = 0;

extern "C" void record_preemption(int signal) { received_signal = signal; }
}  // namespace

PreemptionSignal::PreemptionSignal() {
  received_signal = 0;
  struct sigaction action {};
  action.sa_handler = record_preemption;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls resume; the loop checks between steps
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGUSR1, &action, &previous_usr1_);
}

PreemptionSignal::~PreemptionSignal() {
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
}

int PreemptionSignal::received() const { return received_signal; }

}  // namespace pipelane
