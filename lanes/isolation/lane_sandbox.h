// The namespaces a lane worker runs in, made by bubblewrap (Debian `bubblewrap`, bwrap(1)): a user
// namespace (no capability of the trainer's user reaches outside it, and every capability inside
// is dropped), a PID namespace whose init is bwrap's (the worker sees and can signal only its own
// processes; when the worker ends, the init ends and the kernel kills everything left in the
// namespace: no daemon outlives the lane), a mount namespace (the whole filesystem read-only, the
// run directory replaced by an empty one, a private /tmp, a minimal /dev and the namespace's own
// /proc; writable: only the lane's output directory), a network namespace with nothing but
// loopback (unless the lane asks for the network), and IPC, UTS and cgroup namespaces of its own.
//
// Why bubblewrap and not the raw system calls: it is the sandbox Flatpak runs every desktop app
// in, audited for years, and it does the order-sensitive parts (private propagation before any
// mount, mount points made inside the new tmpfs, the read-only remount of every submount, the
// reaping init of the PID namespace, PR_SET_PDEATHSIG down the chain) that a hand-made version
// would have to get right again.
#pragma once
#include <string>
#include <vector>

namespace pipelane {

struct SandboxRequest {
  std::string bwrap = "/usr/bin/bwrap";      // the program; "" runs the worker without namespaces
  std::string output_dir;                    // the lane's only writable place besides /tmp
  std::string hidden_dir;                    // replaced by an empty directory (the run directory)
  std::vector<std::string> readable_paths;   // shown read-only although under /tmp or hidden_dir
  bool network = false;                      // the host's network namespace
};

// bwrap's arguments up to and including "--": the worker's argv follows.
std::vector<std::string> bwrap_arguments(const SandboxRequest& request);

// The layers bwrap gives, one word each, for the report.
std::vector<std::string> sandbox_layers(const SandboxRequest& request);

// The paths among a lane's option values that bwrap_arguments would otherwise hide: absolute,
// existing, under /tmp or `hidden_dir` (a lane's inputs are named in its options).
std::vector<std::string> hidden_option_paths(const std::vector<std::string>& values, const std::string& hidden_dir);

}  // namespace pipelane
