// isolation = process: the lane runs in a worker process of this rank (lanes/isolation/
// lane_worker.h), created from the registry there by name (a built-in or a plugin), so nothing it
// does reaches training: a crash, exit() or abort ends the worker, a call past its deadline gets
// the worker's whole process tree SIGKILLed (the gap ends on time), its memory and files are
// capped by the kernel, and its floating-point environment, threads and signal handlers are its
// own. Any of those ends the lane (LaneCrash / LaneTimeout, naming the signal or exit status), and
// the gap scheduler quarantines it. teardown() (or the destructor) kills whatever the lane left
// running, including processes that left their session.
//
// Each call is a request over a socket; the trainer blocks in poll() meanwhile, so the worker has
// the rank's core to itself. The worker's stdout and stderr go to <output_dir>/worker.log.
//
// The worker runs in a sandbox (lanes/isolation/lane_sandbox.h: bubblewrap's namespaces), in
// control groups of its own (lane_cgroup.h: memory, pids, and a CPU quota opened only during a
// call) and under a system-call filter (lane_seccomp.h). A layer the machine refuses is left out,
// said once on stderr and in report()["sandbox"], never silently. A lane over a cgroup limit is
// quarantined with the limit's name. Replies are validated (worker_replies.h).
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "lanes/isolation/guarded_lane.h"
#include "lanes/isolation/lane_cgroup.h"
#include "lanes/isolation/worker_protocol.h"

namespace pipelane {

struct LaneWorkerLaunch {
  std::vector<std::string> command;  // argv that starts `lane-worker` (its arguments are appended)
  std::string plugin_path;           // the plugin that provides the lane; "" for a built-in
  int threads = 1;                   // OpenMP/BLAS threads in the worker
  std::string cpus;                  // the cores it may run on (a cpuset list); "": any
  // Whether processes a step leaves running are the lane's work (the command lane) or a fault
  // (a plugin: they are killed and the lane quarantined).
  bool allow_child_processes = false;
  // The sandbox: bwrap's path ("": none), the directory hidden from the lane (the run
  // directory), whether the lane keeps the host's network, and the cgroups' limits.
  std::string bwrap = "/usr/bin/bwrap";
  std::string hidden_dir;
  bool network = false;
  bool cgroups = true;
  int pids_max = 256;  // tasks (processes and threads) of the worker, bwrap's two included
  // Memory of the worker's own code (the pipelane binary, its libraries, stdio, bwrap), charged
  // beside the arena and the lane's allowance: the cgroup's memory limit is their sum.
  std::uint64_t worker_memory_bytes = std::uint64_t{256} << 20;
};

class ProcessLane final : public GuardedLane {
 public:
  ProcessLane(std::string name, std::string work_unit, LaneWorkerLaunch launch);
  ~ProcessLane() override;  // kills the worker's process tree
  ProcessLane(const ProcessLane&) = delete;
  ProcessLane& operator=(const ProcessLane&) = delete;

  std::string name() const override { return name_; }
  std::string work_unit() const override { return work_unit_; }
  // Starts the worker: its arena is ctx.arena's capacity in sealed shared memory, its options,
  // output directory, rank and seed are ctx's (ctx.device, stream and arena are not used).
  void setup(LaneContext& ctx) override;
  double step(LaneContext& ctx) override;
  bool finished() const override { return finished_; }
  std::string save() const override;
  void load(const std::string& state) override;
  nlohmann::json report() const override;  // the last one once the worker is gone
  void teardown(LaneContext& ctx) override;

  void set_limits(const LaneLimits& limits) override { limits_ = limits; }
  LaneStepCost last_step_cost() const override { return cost_; }
  std::size_t memory_high_water() const override { return memory_high_water_; }
  LaneIsolation isolation() const override { return LaneIsolation::Process; }

  pid_t worker_pid() const { return keeper_; }  // -1 when none runs
  const nlohmann::json& sandbox() const { return sandbox_; }  // what report()["sandbox"] says

 private:
  void spawn(const LaneContext& ctx, bool with_namespaces);
  std::vector<std::string> worker_argv(bool with_namespaces, const LaneContext& ctx) const;
  void describe_sandbox(bool with_namespaces, const std::string& namespaces_missing, const std::string& seccomp);
  // A LaneError naming the cgroup limit the worker hit since it started, if it hit one.
  void check_cgroup_limits(const char* what) const;
  // Sends a request and waits for the reply's payload. Past the deadline, or when the worker
  // ends, the worker's tree is killed and LaneTimeout / LaneCrash thrown; a Fail reply becomes
  // the lane's error (LaneError, ArenaQuotaError, std::runtime_error).
  std::string request(WorkerOp op, const std::string& payload, double deadline_s, const char* what) const;
  std::string memory_limit_text() const;  // "its memory limit (cgroup memory N MiB: ...)"
  [[noreturn]] void worker_ended(const char* what) const;
  void end_worker() const;  // kills the tree and reaps; idempotent

  std::string name_, work_unit_;
  LaneWorkerLaunch launch_;
  LaneLimits limits_;
  std::string log_path_;
  mutable pid_t keeper_ = -1;
  mutable int socket_ = -1;
  mutable int status_fd_ = -1;
  mutable bool gone_ = false;  // the worker ended (or was ended): no more calls
  std::uint64_t address_space_bytes_ = 0;
  bool finished_ = false;
  LaneStepCost cost_;
  std::size_t memory_high_water_ = 0;
  mutable nlohmann::json last_report_ = nlohmann::json::object();
  LaneCgroup cgroup_;
  std::uint64_t memory_limit_bytes_ = 0;  // the cgroup's (also the bound of a plausible memory reply)
  nlohmann::json sandbox_ = nlohmann::json::object();
  mutable std::uint32_t sequence_ = 0;
};

}  // namespace pipelane
