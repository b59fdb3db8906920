// The worker side of isolation = process (`pipelane lane-worker`, started only by ProcessLane).
//
// The spawned process is a keeper: a child subreaper that forks the lane process and then only
// reaps, so whatever the lane starts (double forks and setsid() included) stays below it even
// after the lane process died, and the trainer can kill the whole tree. It reports the lane
// process's wait status on its status pipe.
//
// The lane process (also a subreaper, so processes a step leaves behind are its own descendants)
// creates the lane from the registry (built-ins, plus the plugin it was given), maps the lane's
// arena from shared memory the trainer created and sealed at the quota, caps its own address space
// (RLIMIT_AS: what it had before the lane was set up plus the arena quota again, at least 64 MiB,
// for the lane's own allocations) and every file it writes (RLIMIT_FSIZE: [lanes] output_mb), and
// serves
// requests (lanes/isolation/worker_protocol.h) until the trainer closes the socket. Both die with
// their parent (PR_SET_PDEATHSIG).
#pragma once

namespace pipelane {

// argv: lane-worker --socket-fd N --arena-fd N --status-fd N --parent PID
//   or: lane-worker --describe PLUGIN --parent PID  (prints what the plugin is: plugin_probe.h)
//   or: lane-worker --join-cgroup FILE ... --exec PROGRAM ARGS...  (joins the lane's cgroups, then
//       becomes PROGRAM: bwrap, or the worker itself; lanes/isolation/lane_cgroup.h)
// PID 0: the worker runs in a PID namespace, whose init (bwrap's) is its parent and dies with the
// trainer. The lane process installs the seccomp filter (lane_seccomp.h) before it loads the lane.
int run_lane_worker(int argc, char** argv);

}  // namespace pipelane
