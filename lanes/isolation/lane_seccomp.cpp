#include "lanes/isolation/lane_seccomp.h"

#include <seccomp.h>

#include <cerrno>
#include <cstring>

namespace pipelane {
namespace {

constexpr const char* kRefused[] = {
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "mount", "umount2", "pivot_root", "chroot",
    "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr", "name_to_handle_at",
    "open_by_handle_at", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "swapon", "swapoff", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "acct", "quotactl",
    "syslog", "iopl", "ioperm", "personality", "lookup_dcookie", "vhangup", nullptr};

}  // namespace

const char* const* lane_seccomp_refused_calls() { return kRefused; }

std::string install_lane_seccomp_filter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return "seccomp_init failed";
  std::string error;
  for (const char* const* name = kRefused; *name && error.empty(); ++name) {
    const int nr = seccomp_syscall_resolve_name(*name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    const int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    if (rc < 0) error = std::string("seccomp_rule_add(") + *name + "): " + std::strerror(-rc);
  }
  if (error.empty()) {
    const int rc = seccomp_load(ctx);
    if (rc < 0) error = std::string("seccomp_load: ") + std::strerror(-rc);
  }
  seccomp_release(ctx);
  return error;
}

}  // namespace pipelane
