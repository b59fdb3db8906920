// Starting a lane worker process: posix_spawn (never a fork of the trainer, an MPI process with
// OpenMP threads), default signal handlers and an empty signal mask, its own process group, and no
// descriptor of the trainer's except those it is given.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace pipelane {

struct WorkerSpawn {
  std::vector<std::string> argv;          // argv[0] is the program
  std::vector<std::pair<int, int>> fds;   // (descriptor here, number it gets in the worker), above 2
  std::string output_path = "/dev/null";  // the worker's stdout and stderr (truncated) ...
  int output_fd = -1;                     // ... or this descriptor, when >= 0
  int threads = 1;                        // OMP_NUM_THREADS of the worker
};

// The worker's pid; LaneError naming the program when it cannot be started.
pid_t spawn_worker(const WorkerSpawn& spawn);

}  // namespace pipelane
