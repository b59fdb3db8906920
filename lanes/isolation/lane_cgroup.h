// The control groups of one lane worker: memory (everything the kernel charges it, anonymous,
// shared, tmpfs and memfd pages alike), pids, and cpu. cgroup v2 when the unified hierarchy has
// the controllers, otherwise v1 (/sys/fs/cgroup/{memory,pids,cpu}, as on machines whose
// controllers are v1). Each group is made below this process's own group, so the lane's limits
// nest inside whatever limits the job already has.
//
// CPU: while the worker serves a call the lane may use `threads` cores; between calls its quota
// is 1 ms per 100 ms, so a thread a lane leaves spinning costs training 1% of one core, not a core.
// Between calls the worker is also frozen (the freezer cgroup, or cgroup.freeze in v2): a quota
// still lets a spinning thread take up to 1 ms of the rank's core each time a gap ends and each
// 100 ms after, before the kernel throttles it; a frozen thread takes nothing. The quota stays as
// the layer for machines without a freezer.
// A quota bounds how much CPU time the lane gets, not where: two busy threads of a lane with one
// core's quota run half the time on each of two cores, one of them another rank's. So the worker
// is also held to `cpus` (a cpuset group), the cores of the rank whose gap it fills.
//
// A controller that cannot be used (no cgroup mounted, no permission to make a group, a
// container) is left out and named in missing(); the rlimits of the worker still apply.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pipelane {

struct LaneCgroupLimits {
  std::uint64_t memory_bytes = 0;  // 0: none
  int pids = 0;                    // 0: none
  int threads = 1;                 // cores during a call
  std::string cpus;                // the cores it may run on, as a cpuset list ("2", "0-3"); "": any
};

// What the kernel counted when a limit was hit.
struct LaneCgroupEvents {
  std::uint64_t oom_kills = 0;      // processes the memory limit killed
  std::uint64_t memory_failures = 0;  // charges the memory limit refused (v1 failcnt, v2 max)
  std::uint64_t pids_refused = 0;   // forks the pids limit refused
  // The most memory the group held (v1 memsw or memory max_usage_in_bytes, v2 memory.peak; 0 where
  // the kernel does not say).
  std::uint64_t memory_peak = 0;
};

// The cores this thread may run on (what mpirun bound the rank to, or every core), as a cpuset
// list ("0,1"): a worker held to them cannot widen its own affinity past the rank's.
std::string cpus_of_this_thread();

class LaneCgroup {
 public:
  LaneCgroup() = default;
  // Makes the groups (named `name`, unique on this machine) and sets the limits.
  LaneCgroup(const std::string& name, const LaneCgroupLimits& limits);
  ~LaneCgroup();  // removes the groups (their processes must be gone)
  LaneCgroup(LaneCgroup&& other) noexcept;
  LaneCgroup& operator=(LaneCgroup&& other) noexcept;
  LaneCgroup(const LaneCgroup&) = delete;
  LaneCgroup& operator=(const LaneCgroup&) = delete;

  // The files a process writes its pid into to join every group (a worker joins before it execs,
  // so everything it starts is inside from its first instruction).
  const std::vector<std::string>& procs_files() const { return procs_files_; }
  // "memory", "pids", "cpu", "freezer", "cpuset" (when cpus were given) that could be set up,
  // and why the others could not.
  const std::vector<std::string>& enforced() const { return enforced_; }
  const std::string& missing() const { return missing_; }

  void open_cpu() const;   // a call starts (or the worker must exit): thawed, `threads` cores
  void close_cpu() const;  // between calls: 1% of a core, and frozen
  LaneCgroupEvents events() const;
  const LaneCgroupLimits& limits() const { return limits_; }

 private:
  struct Group {
    std::string controller, dir;
    bool v2 = false;
  };
  void add(const std::string& controller);
  void set(const Group& group, const std::string& file, const std::string& value);
  const Group* find(const std::string& controller) const;
  void remove();
  void set_idle_quota() const;
  void freeze(bool frozen) const;
  void open_control_files();
  void close_control_files();

  LaneCgroupLimits limits_;
  std::string name_;
  std::vector<Group> groups_;
  std::vector<std::string> procs_files_, enforced_;
  std::string missing_;
  // The quota and freezer files, kept open: they are written twice per lane call, and an open,
  // write and close each time cost a call to a tiny lane step several times its own length.
  int quota_fd_ = -1, freeze_fd_ = -1;
};

}  // namespace pipelane
