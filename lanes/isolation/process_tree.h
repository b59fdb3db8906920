// Processes below a process, found through /proc/PID/task/TID/children, and how to end all of them.
// With the root a child subreaper (PR_SET_CHILD_SUBREAPER), a process that double-forks or calls
// setsid() stays below it, so nothing a lane starts can escape these walks.
#pragma once
#include <sys/resource.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace pipelane {

// Direct children of `pid` (zombies included).
std::vector<pid_t> children_of(pid_t pid);

// Descendants of `root` that have not exited (zombies left out), parents before children.
std::vector<pid_t> live_descendants(pid_t root);

// Sends `signal` to every live descendant of `root` (not to root), walking again until a walk finds
// none it has not signalled (a process may fork while it is walked). Returns how many it signalled.
int signal_descendants(pid_t root, int signal);

// SIGKILLs every descendant of `root` until none is alive; returns how many it killed.
int kill_descendants(pid_t root);

// SIGKILLs every descendant of `root` until none is alive (root first stopped, so it starts no
// more), then root itself, and reaps root. Returns root's wait status (-1 if it could not be
// reaped, e.g. not our child); `usage` receives its resource usage when given.
int kill_process_tree(pid_t root, rusage* usage = nullptr);

// "SIGSEGV" (or "signal 64" when unnamed).
std::string signal_name(int signal);
// "exited with status 3", "was killed by signal 11 (SIGSEGV)".
std::string describe_wait_status(int status);

// "pid 123 (sh)": the process and its command name, for messages.
std::string describe_process(pid_t pid);

}  // namespace pipelane
