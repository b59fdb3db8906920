#include "lanes/isolation/process_tree.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

namespace pipelane {
namespace {

// State letter of /proc/PID/stat ('Z' zombie, 'X' dead); 0 when the process is gone.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return 0;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return 0;
  return line[close + 2];
}

bool alive(pid_t pid) {
  const char state = process_state(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

void append_children(pid_t pid, std::vector<pid_t>* out) {
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task/";
  DIR* dir = opendir(task_dir.c_str());
  if (!dir) return;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream children(task_dir + entry->d_name + "/children");
    pid_t child;
    while (children >> child) out->push_back(child);
  }
  closedir(dir);
}

}  // namespace

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  append_children(pid, &children);
  return children;
}

std::vector<pid_t> live_descendants(pid_t root) {
  std::vector<pid_t> all;
  append_children(root, &all);
  // Breadth-first; a bound keeps a fork bomb from making this walk unbounded.
  for (std::size_t i = 0; i < all.size() && all.size() < 100000; ++i) append_children(all[i], &all);
  std::vector<pid_t> live;
  for (pid_t pid : all)
    if (alive(pid)) live.push_back(pid);
  return live;
}

int signal_descendants(pid_t root, int signal) {
  std::set<pid_t> signalled;
  for (int round = 0; round < 100; ++round) {
    bool fresh = false;
    for (pid_t pid : live_descendants(root))
      if (signalled.insert(pid).second) {
        ::kill(pid, signal);
        fresh = true;
      }
    if (!fresh) break;
  }
  return static_cast<int>(signalled.size());
}

int kill_descendants(pid_t root) {
  std::set<pid_t> killed;
  for (int round = 0; round < 1000; ++round) {
    const std::vector<pid_t> live = live_descendants(root);
    if (live.empty()) break;
    for (pid_t pid : live) {
      ::kill(pid, SIGKILL);
      killed.insert(pid);
    }
    // Killed processes turn into zombies at once, unless in an uninterruptible sleep.
    if (round > 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return static_cast<int>(killed.size());
}

int kill_process_tree(pid_t root, rusage* usage) {
  if (root <= 0) return -1;
  ::kill(root, SIGSTOP);  // it forks no more while its tree is walked
  kill_descendants(root);
  ::kill(root, SIGKILL);
  int status = 0;
  rusage ru{};
  pid_t r;
  do r = ::wait4(root, &status, 0, &ru);
  while (r < 0 && errno == EINTR);
  if (r != root) return -1;
  if (usage) *usage = ru;
  return status;
}

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(signal);
}

std::string describe_wait_status(int status) {
  if (status < 0) return "ended (its status is unknown)";
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + signal_name(WTERMSIG(status)) + ")";
  return "stopped (status " + std::to_string(status) + ")";
}

std::string describe_process(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return "pid " + std::to_string(pid) + (name.empty() ? "" : " (" + name + ")");
}

}  // namespace pipelane
