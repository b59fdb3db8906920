// The system-call filter of a lane process (libseccomp): every call is allowed except those no
// lane needs and that reach beyond the lane's own work: debugging or reading other processes
// (ptrace, process_vm_readv/writev, kcmp), the filesystem's shape (mount, umount, pivot_root,
// chroot, name_to_handle_at, open_by_handle_at), new namespaces (unshare, setns, clone3 is left:
// glibc needs it), kernel keys (keyctl, add_key, request_key), eBPF and perf events (bpf,
// perf_event_open), userfaultfd, the machine itself (reboot, kexec, modules, swap, clock, acct,
// quotactl, syslog, iopl/ioperm) and personality changes. They fail with EPERM (not a kill: a
// library that probes them at load time keeps working). The filter is inherited by every process
// the lane starts and cannot be removed (no_new_privs is set with it).
#pragma once
#include <string>

namespace pipelane {

// Installs the filter on the calling thread (and threads it starts afterwards); "" on success,
// the reason otherwise.
std::string install_lane_seccomp_filter();

// The names of the refused system calls, for the report and the docs' test.
const char* const* lane_seccomp_refused_calls();

}  // namespace pipelane
