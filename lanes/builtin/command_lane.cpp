#include "lanes/builtin/command_lane.h"

#include "lanes/isolation/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pipelane {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// utime+stime+cutime+cstime of one process in clock ticks, and its children's pids; false if gone.
// CPU milliseconds of one live process: its threads' run time from /proc/PID/task/TID/schedstat
// (nanoseconds; clock ticks of 10 ms were too coarse for 2-5 ms slices: most slices read 0, and
// the ones that crossed a tick made the cost look larger), plus its reaped children's cutime and
// cstime (ticks: schedstat has no such field). Without schedstat, utime + stime in ticks.
// Appends the process's direct children to `children`, and gives its process group.
bool read_proc(pid_t pid, double tick_ms, double* ms, bool* fine, std::vector<pid_t>* children, pid_t* group) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(line.substr(close + 1));
  std::string tok;
  long long own_ticks = 0, child_ticks = 0;
  for (int field = 3; field <= 17 && in >> tok; ++field) {  // fields 14-17: utime stime cutime cstime
    if (field == 5) *group = static_cast<pid_t>(std::atol(tok.c_str()));
    if (field == 14 || field == 15) own_ticks += std::atoll(tok.c_str());
    if (field == 16 || field == 17) child_ticks += std::atoll(tok.c_str());
  }
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task/";
  std::vector<pid_t> tids;
  if (DIR* d = opendir(task_dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.push_back(static_cast<pid_t>(std::atol(e->d_name)));
    closedir(d);
  }
  long long run_ns = 0;
  bool all_fine = !tids.empty();
  for (pid_t tid : tids) {
    std::ifstream sched(task_dir + std::to_string(tid) + "/schedstat");
    long long ns = 0;
    if (sched >> ns) run_ns += ns;
    else all_fine = false;
    // Direct children of every thread of the process.
    std::ifstream ch(task_dir + std::to_string(tid) + "/children");
    pid_t c;
    while (ch >> c) children->push_back(c);
  }
  *fine = all_fine;
  *ms = (all_fine ? static_cast<double>(run_ns) / 1e6 : static_cast<double>(own_ticks) * tick_ms) +
        static_cast<double>(child_ticks) * tick_ms;
  return true;
}

class CommandLane final : public Lane {
 public:
  ~CommandLane() override { kill_and_reap(); }

  std::string name() const override { return "command"; }
  std::string work_unit() const override { return "cpu_ms"; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    command_ = o.get_string("command", "");
    slice_ms_ = o.get_int("slice_ms", 2, 1, 60000);
    workdir_ = o.get_string("workdir", "");
    o.reject_unknown();
    if (command_.empty()) throw LaneError("[lane.command]: 'command = ...' is required");
    stdout_path_ = ctx.output_dir + "/stdout.txt";
    stderr_path_ = ctx.output_dir + "/stderr.txt";
    tick_ms_ = 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
    // In a lane worker (a child subreaper: lanes/isolation/lane_worker.h) a process that leaves the
    // command's group (setsid) and outlives its parent is adopted by this process, so every
    // descendant of it is the command's. In the trainer (isolation = thread) such a process is
    // out of reach once its parent exits.
    int subreaper = 0;
    contained_ = ::prctl(PR_GET_CHILD_SUBREAPER, &subreaper) == 0 && subreaper != 0;
    start();
  }

  double step(LaneContext&) override {
    if (finished_ || pid_ <= 0) return 0.0;
    drain_stop_reports();
    if (finished_) return 0.0;
    const double before = cpu_ms();
    cpu_outside_ms_ += std::max(0.0, before - last_after_ms_);
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(-pid_, SIGCONT);
    if (escaped_) signal_descendants(::getpid(), SIGCONT);
    wait_exit_for(slice_ms_);
    if (!finished_) stop_group();
    wall_in_ms_ += ms_since(t0);
    const bool escaped_before = escaped_;
    const double after = cpu_ms();
    if (escaped_ && !escaped_before && !finished_) signal_descendants(::getpid(), SIGSTOP);  // the newcomer
    const double used = std::max(0.0, after - before);
    cpu_in_ms_ += used;
    last_after_ms_ = after;
    ++steps_;
    return used;
  }

  bool finished() const override { return finished_; }

  std::string save() const override {
    nlohmann::json j;
    j["steps"] = steps_;
    j["cpu_ms_in_gaps"] = cpu_in_ms_;
    j["cpu_ms_outside_gaps"] = cpu_outside_ms_;
    j["wall_ms_in_gaps"] = wall_in_ms_;
    j["restarts"] = restarts_;
    j["finished"] = finished_;
    j["exit_code"] = exit_code_;
    j["signal"] = signal_;
    return j.dump();
  }

  void load(const std::string& state) override {
    try {
      const auto j = nlohmann::json::parse(state);
      steps_ = j.at("steps").get<std::int64_t>();
      cpu_in_ms_ = j.at("cpu_ms_in_gaps").get<double>();
      cpu_outside_ms_ = j.at("cpu_ms_outside_gaps").get<double>();
      wall_in_ms_ = j.at("wall_ms_in_gaps").get<double>();
      restarts_ = j.at("restarts").get<std::int64_t>();
      if (j.at("finished").get<bool>()) {  // it already ran to the end: do not run it again
        kill_and_reap();
        finished_ = true;
        killed_at_teardown_ = false;
        exit_code_ = j.at("exit_code").get<int>();
        signal_ = j.at("signal").get<int>();
      } else if (steps_ > 0) {
        ++restarts_;  // the previous process is gone; this one starts from the beginning
      }
    } catch (const nlohmann::json::exception& e) {
      throw LaneError(std::string("command: cannot load saved state: ") + e.what());
    }
  }

  nlohmann::json report() const override {
    nlohmann::json j;
    j["command"] = command_;
    j["pid"] = pid_;
    j["state"] = !finished_ ? (pid_ > 0 ? "stopped" : "not started")
                 : killed_at_teardown_ ? "killed at teardown"
                 : signal_ != 0 ? "killed by signal " + std::to_string(signal_)
                                : "exited";
    j["exit_code"] = finished_ && signal_ == 0 && !killed_at_teardown_ ? nlohmann::json(exit_code_) : nlohmann::json();
    j["signal"] = signal_;
    j["steps"] = steps_;
    j["slice_ms"] = slice_ms_;
    j["cpu_ms_in_gaps"] = cpu_in_ms_;
    j["cpu_ms_outside_gaps"] = cpu_outside_ms_;
    j["wall_ms_in_gaps"] = wall_in_ms_;
    j["cpu_resolution_ms"] = resolution_ms_;
    j["restarts"] = restarts_;
    j["stdout"] = stdout_path_;
    j["stderr"] = stderr_path_;
    return j;
  }

  void teardown(LaneContext&) override {
    if (!finished_ && pid_ > 0) {
      kill_and_reap();
      finished_ = true;
      killed_at_teardown_ = true;
    }
  }

 private:
  void start() {
    // vfork, not fork: fork would copy the trainer's page tables and leave every page of its
    // arenas copy-on-write, so training's next step took a page fault per page it wrote (+200 ms
    // on the first step of the pp2 bench). The vfork child shares our memory until exec, so it
    // only makes system calls on values prepared here, and stops itself after exec, in the shell.
    const char* cmd = command_.c_str();
    const char* out = stdout_path_.c_str();
    const char* err = stderr_path_.c_str();
    const char* dir = workdir_.empty() ? nullptr : workdir_.c_str();
    const pid_t parent = ::getpid();
    const pid_t pid = ::vfork();
    if (pid < 0) throw LaneError(std::string("command: vfork failed: ") + std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::setpgid(0, 0);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      const int in_fd = ::open("/dev/null", O_RDONLY);
      const int out_fd = ::open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
      const int err_fd = ::open(err, O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (in_fd < 0 || out_fd < 0 || err_fd < 0) ::_exit(126);
      ::dup2(in_fd, 0);
      ::dup2(out_fd, 1);
      ::dup2(err_fd, 2);
      if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
        for (int fd = 3; fd < 65536; ++fd) ::close(fd);
      if (dir && ::chdir(dir) != 0) ::_exit(126);
      // The shell stops itself (it is the group leader we signal), then becomes the command's
      // shell at the first step()'s SIGCONT: $1 is the command, untouched by quoting.
      ::execl("/bin/sh", "sh", "-c", "kill -STOP $$; exec /bin/sh -c \"$1\"", "pipelane-lane", cmd,
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from this side, so the group exists before we signal it
    pid_ = pid;
    int status = 0;
    rusage ru{};
    pid_t r;
    do r = ::wait4(pid_, &status, WUNTRACED, &ru);
    while (r < 0 && errno == EINTR);
    if (r != pid_) throw LaneError(std::string("command: waiting for the child failed: ") + std::strerror(errno));
    if (!WIFSTOPPED(status)) {
      on_exit(status, ru);
      throw LaneError("command: the child exited before running '" + command_ + "' (exit status " +
                      std::to_string(exit_code_) + "; workdir '" + workdir_ + "' or output files?)");
    }
    last_after_ms_ = cpu_ms();
  }

  // Waits up to ms for the shell to exit (pidfd + poll; sleeping in 1 ms polls without pidfd).
  void wait_exit_for(std::int64_t ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    for (;;) {
      int status = 0;
      rusage ru{};
      const pid_t r = ::wait4(pid_, &status, WNOHANG, &ru);
      if (r == pid_ && !WIFSTOPPED(status) && !WIFCONTINUED(status)) {
        on_exit(status, ru);
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                            deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>((left + 999) / 1000));
        if (!(p.revents & POLLIN) && std::chrono::steady_clock::now() >= deadline) break;
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(std::min<long long>(left, 1000)));
      }
    }
    if (pidfd >= 0) ::close(pidfd);
  }

  // SIGSTOP to the group, then wait (bounded) until the shell reports stopped. Not a blocking
  // wait: a shell inside vfork() whose child was stopped before exec cannot take the stop until
  // that child runs again (it is not running either, so the slice is over all the same).
  void stop_group() {
    ::kill(-pid_, SIGSTOP);
    // Processes that left the group (setsid) are stopped one by one; cpu_ms() notices them.
    if (escaped_) signal_descendants(::getpid(), SIGSTOP);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
      int status = 0;
      rusage ru{};
      const pid_t r = ::wait4(pid_, &status, WUNTRACED | WNOHANG, &ru);
      if (r == pid_) {
        if (!WIFSTOPPED(status)) on_exit(status, ru);
        return;
      }
      if (r < 0 && errno != EINTR) return;
      if (ms_since(t0) > 50.0) return;
      std::this_thread::sleep_for(std::chrono::microseconds(i < 10 ? 20 : 200));
    }
  }

  // Stop reports left from a slice whose stop was confirmed late; an exit found here is recorded.
  void drain_stop_reports() {
    for (;;) {
      int status = 0;
      rusage ru{};
      const pid_t r = ::wait4(pid_, &status, WUNTRACED | WNOHANG, &ru);
      if (r != pid_) return;
      if (!WIFSTOPPED(status)) {
        on_exit(status, ru);
        return;
      }
    }
  }

  void on_exit(int status, const rusage& ru) {
    finished_ = true;
    if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) signal_ = WTERMSIG(status);
    final_cpu_ms_ = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
                    (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0;
    ::kill(-pid_, SIGKILL);  // whatever it left behind in its process group
    if (contained_) kill_descendants(::getpid());  // and what left the group
  }

  // CPU milliseconds of the live process tree (exact from rusage once the shell is reaped).
  // Notes whether any process of it left the command's group (escaped_).
  double cpu_ms() const {
    if (finished_) return std::max(final_cpu_ms_, last_after_ms_);
    double total = 0;
    bool fine = true;
    // In a worker: from every child of it (the shell, and orphans it adopted).
    std::vector<pid_t> todo = contained_ ? children_of(::getpid()) : std::vector<pid_t>{pid_};
    for (std::size_t i = 0; i < todo.size() && i < 4096; ++i) {
      double ms = 0;
      bool process_fine = false;
      pid_t group = pid_;
      if (read_proc(todo[i], tick_ms_, &ms, &process_fine, &todo, &group)) {
        total += ms;
        fine = fine && process_fine;
        if (group != pid_ && contained_) escaped_ = true;
      }
    }
    resolution_ms_ = fine ? 1e-6 : tick_ms_;
    return total;
  }

  void kill_and_reap() {
    if (pid_ <= 0 || finished_) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status = 0;
    rusage ru{};
    pid_t r;
    do r = ::wait4(pid_, &status, 0, &ru);
    while (r < 0 && errno == EINTR);
    if (r == pid_) on_exit(status, ru);
  }

  std::string command_, workdir_, stdout_path_, stderr_path_;
  std::int64_t slice_ms_ = 2;
  double tick_ms_ = 10.0;
  mutable double resolution_ms_ = 10.0;  // of the last cpu_ms(): 1e-6 with schedstat, else a tick
  pid_t pid_ = -1;
  bool finished_ = false, killed_at_teardown_ = false;
  bool contained_ = false;        // running in a lane worker, which adopts every orphan of the command
  mutable bool escaped_ = false;  // some process of the command left its group (setsid)
  int exit_code_ = -1, signal_ = 0;
  std::int64_t steps_ = 0, restarts_ = 0;
  double cpu_in_ms_ = 0, cpu_outside_ms_ = 0, wall_in_ms_ = 0, last_after_ms_ = 0, final_cpu_ms_ = 0;
};

}  // namespace

std::unique_ptr<Lane> make_command_lane() { return std::make_unique<CommandLane>(); }

}  // namespace pipelane
