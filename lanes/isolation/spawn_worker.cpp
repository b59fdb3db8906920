#include "lanes/isolation/spawn_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lanes/lane.h"

extern char** environ;

namespace pipelane {
namespace {

// posix_spawn's actions with a destructor.
struct SpawnActions {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  std::vector<int> copies;
  SpawnActions() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnActions() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    for (int fd : copies) ::close(fd);
  }
  // A copy at 10 or above, so placing one descriptor cannot overwrite another's source.
  int high_copy(int fd) {
    const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
    if (copy < 0) throw LaneError(std::string("lane worker: fcntl(F_DUPFD_CLOEXEC): ") + std::strerror(errno));
    copies.push_back(copy);
    return copy;
  }
};

}  // namespace

pid_t spawn_worker(const WorkerSpawn& spawn) {
  SpawnActions s;
  int highest = 2;
  std::vector<std::pair<int, int>> placed;
  for (const auto& [fd, target] : spawn.fds) {
    placed.emplace_back(s.high_copy(fd), target);
    highest = std::max(highest, target);
  }
  const int output = spawn.output_fd >= 0 ? s.high_copy(spawn.output_fd) : -1;
  posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  if (output >= 0)
    posix_spawn_file_actions_adddup2(&s.actions, output, 1);
  else
    posix_spawn_file_actions_addopen(&s.actions, 1, spawn.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&s.actions, 1, 2);
  for (const auto& [copy, target] : placed) posix_spawn_file_actions_adddup2(&s.actions, copy, target);
  // Nothing else of the trainer's (MPI's sockets, checkpoint files) reaches the worker.
  posix_spawn_file_actions_addclosefrom_np(&s.actions, highest + 1);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &all);  // the trainer's handlers and ignores stay here
  posix_spawnattr_setpgroup(&s.attr, 0);
  posix_spawnattr_setflags(&s.attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> args = spawn.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Thread counts go in the environment: OpenBLAS starts its threads when it is loaded.
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("OMP_NUM_THREADS=", 0) != 0 && entry.rfind("OPENBLAS_NUM_THREADS=", 0) != 0 &&
        entry.rfind("MALLOC_ARENA_MAX=", 0) != 0)
      env.push_back(entry);
  }
  env.push_back("OMP_NUM_THREADS=" + std::to_string(spawn.threads));
  env.push_back("OPENBLAS_NUM_THREADS=1");  // the lane process sets its count after its fork
  env.push_back("MALLOC_ARENA_MAX=1");      // no 64 MiB address-space reservation per thread
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &s.actions, &s.attr, argv.data(), envp.data());
  if (rc != 0) throw LaneError("cannot start its worker " + args[0] + ": " + std::strerror(rc));
  return pid;
}

}  // namespace pipelane
