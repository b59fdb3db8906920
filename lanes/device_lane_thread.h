// DeviceLaneThread: the host thread of a device lane (a lane that runs_on_device() on a device
// backend). The gap scheduler runs on training's host thread and only posts a device lane's steps
// here; this thread runs them in order: it records the step's events on the lane's stream and
// calls the lane's step(), whose host part may wait for the lane's stream (a value brought back
// to the host). Training's thread never waits for a lane's stream in a gap.
//
// Why a thread rather than deferring the values (copying them into pinned memory behind an event
// and reading them at the next gap): smalltrain's optimizer kernels take the clipping scale the
// host computes from the gradient norm, the loss and the norm come from Backend ops that return
// host values (and synchronise their stream inside), and prefill's argmax picks the token on the
// host. Deferring those reads would need new Backend ops (device-side clipping and argmax) and
// would change the lanes' code paths; a thread keeps the lanes' code, numbers and checkpoints as
// they are, and moves only where the waiting happens.
//
// Posting never waits for a step. wait_idle() does: the scheduler calls it only where waiting is
// harmless (calibration before training, a checkpoint, teardown, the summary, a quarantine after
// the lane's own failure) or needed before the lane's other calls (a Lane is not thread-safe:
// nothing else may call it while a posted step runs).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace pipelane {

class DeviceLaneThread {
 public:
  DeviceLaneThread();
  ~DeviceLaneThread();  // runs what was posted, then joins
  DeviceLaneThread(const DeviceLaneThread&) = delete;
  DeviceLaneThread& operator=(const DeviceLaneThread&) = delete;

  // Queues `task` behind the tasks posted before it; returns without waiting for any of them.
  // A task must not throw (it reports its failure in what it writes).
  void post(std::function<void()> task);
  // Returns once every task posted so far has run; what they wrote is visible afterwards.
  void wait_idle();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace pipelane
