#include "lanes/isolation/lane_worker.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <new>
#include <string>

#include <nlohmann/json.hpp>

#include "lanes/isolation/lane_seccomp.h"
#include "lanes/isolation/output_quota.h"
#include "lanes/isolation/process_tree.h"
#include "lanes/isolation/step_timer.h"
#include "lanes/isolation/worker_protocol.h"
#include "lanes/lane_registry.h"
#include "runtime/backend_registry.h"

namespace pipelane {
namespace {

struct WorkerArgs {
  int socket_fd = -1, arena_fd = -1, status_fd = -1;
  pid_t parent = 0;       // 0: in a sandbox, whose init is the parent (it dies with the trainer)
  std::string describe;  // a plugin to describe instead of serving a lane
};

bool parse_args(int argc, char** argv, WorkerArgs* args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (key == "--socket-fd") args->socket_fd = static_cast<int>(value);
    else if (key == "--arena-fd") args->arena_fd = static_cast<int>(value);
    else if (key == "--status-fd") args->status_fd = static_cast<int>(value);
    else if (key == "--parent") args->parent = static_cast<pid_t>(value);
    else if (key == "--describe") args->describe = argv[i + 1];
    else return false;
  }
  if (args->parent < 0) return false;
  return !args->describe.empty() || (args->socket_fd >= 0 && args->arena_fd >= 0 && args->status_fd >= 0);
}

// Prints the plugin's name and work unit as one JSON line, or {"error": the loader's message}, and
// ends whatever its loading started (lanes/isolation/plugin_probe.h).
int describe(const std::string& path) {
  nlohmann::json answer;
  try {
    LaneRegistry registry = LaneRegistry::with_builtins();
    registry.load_plugin(path);
    for (const std::string& name : registry.names())
      if (!registry.plugin_path(name).empty()) {
        const std::unique_ptr<Lane> lane = registry.create(name);
        answer = {{"name", lane->name()}, {"work_unit", lane->work_unit()}};
      }
  } catch (const std::exception& error) {
    answer = {{"error", error.what()}};
  }
  std::printf("\n%s\n", answer.dump().c_str());
  std::fflush(stdout);
  kill_descendants(::getpid());
  ::_exit(0);  // no destructors of the plugin's static objects
}

// What the keeper sends on its status pipe when the lane process ends.
struct LaneProcessEnd {
  int status = 0;
  long peak_rss_kb = 0;
};

// Reaps everything below it; reports the lane process's end; returns when nothing is left.
int keep(pid_t lane, const WorkerArgs& args) {
  ::close(args.socket_fd);
  ::close(args.arena_fd);
  for (;;) {
    int status = 0;
    rusage usage{};
    const pid_t pid = ::wait4(-1, &status, 0, &usage);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) return 0;  // no children left
    if (pid == lane) {
      const LaneProcessEnd end{status, usage.ru_maxrss};
      (void)!::write(args.status_fd, &end, sizeof end);
    }
  }
}

std::uint64_t virtual_memory_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

void set_limit(int resource, std::uint64_t bytes, const char* what) {
  rlimit limit{};
  getrlimit(resource, &limit);
  const rlim_t wanted = limit.rlim_max == RLIM_INFINITY ? bytes : std::min<rlim_t>(bytes, limit.rlim_max);
  limit.rlim_cur = limit.rlim_max = wanted;  // hard too: the lane cannot raise it again
  if (setrlimit(resource, &limit) != 0)
    throw LaneError(std::string("lane worker: cannot set ") + what + ": " + std::strerror(errno));
}

// The lane's arena: the shared memory the trainer created, sealed at the quota, mapped here. The
// descriptor is closed once mapped: the lane gets no handle to it.
class SharedArenaMemory final : public MemoryResource {
 public:
  SharedArenaMemory(int fd, std::uint64_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) {
      base_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base_ == MAP_FAILED) {
        base_ = nullptr;
        ::close(fd);
        throw LaneError(std::string("lane worker: cannot map the lane's arena: ") + std::strerror(errno));
      }
    }
    ::close(fd);
  }
  ~SharedArenaMemory() override {
    if (base_) ::munmap(base_, bytes_);
  }
  MemoryKind kind() const override { return MemoryKind::Host; }
  void* reserve(std::size_t bytes, std::size_t alignment) override {
    // One reservation, the whole mapping (page-aligned, so any arena alignment up to a page).
    if (reserved_ || bytes > bytes_ || alignment > static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))) return nullptr;
    reserved_ = true;
    return base_;
  }
  void release(void*) override { reserved_ = false; }
  void zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }

 private:
  void* base_ = nullptr;
  std::uint64_t bytes_;
  bool reserved_ = false;
};

// One lane, served over the socket.
class WorkerSession {
 public:
  WorkerSession(int arena_fd, std::string seccomp_error) : arena_fd_(arena_fd), seccomp_error_(std::move(seccomp_error)) {}
  ~WorkerSession() { lane_.reset(); }

  WorkerFrame handle(const WorkerFrame& request) {
    try {
      switch (request.op) {
        case WorkerOp::Setup: return ok(setup(request.payload));
        case WorkerOp::Step: return step();
        case WorkerOp::Save: return ok(lane().save());
        case WorkerOp::Load:
          lane().load(request.payload);
          return ok(nlohmann::json{{"finished", lane().finished()}}.dump());
        case WorkerOp::Report: return ok(lane().report().dump());
        case WorkerOp::Teardown:
          lane().teardown(*ctx_);
          return ok(lane().report().dump());
        default: return fail(WorkerFailure::Exception, "unknown request " + std::to_string(int(request.op)));
      }
    } catch (const ArenaQuotaError& error) {
      return fail(WorkerFailure::Quota, error.what());
    } catch (const LaneError& error) {
      return fail(WorkerFailure::Lane, error.what());
    } catch (const std::bad_alloc&) {
      return fail(WorkerFailure::Memory, "ran out of memory: its worker may allocate " +
                                             std::to_string(allowance_ >> 20) + " MiB besides its arena");
    } catch (const std::exception& error) {
      return fail(WorkerFailure::Exception, error.what());
    } catch (...) {
      return fail(WorkerFailure::Exception, "a non-standard exception");
    }
  }

 private:
  static WorkerFrame ok(std::string payload) { return {WorkerOp::Ok, std::move(payload)}; }
  static WorkerFrame fail(WorkerFailure kind, const std::string& message) {
    return {WorkerOp::Fail, std::string(1, static_cast<char>(kind)) + message};
  }
  Lane& lane() {
    if (!lane_ || !ctx_) throw LaneError("lane worker: no lane was set up");
    return *lane_;
  }

  std::string setup(const std::string& payload) {
    if (lane_) throw LaneError("lane worker: setup requested twice");
    const nlohmann::json j = nlohmann::json::parse(payload);
    const std::string name = j.at("lane");
    LaneRegistry registry = LaneRegistry::with_builtins();
    const std::string plugin = j.at("plugin");
    if (!plugin.empty()) registry.load_plugin(plugin);
    lane_ = registry.create(name);
    BackendOptions backend_options;
    backend_options.threads = j.at("threads").get<int>();
    threads_ = std::max(1, backend_options.threads);
    backend_ = BackendRegistry::with_builtins().create("cpu", backend_options);
    stream_ = backend_->create_stream(StreamPriority::Low);
    arena_bytes_ = j.at("arena_bytes").get<std::uint64_t>();
    arena_memory_ = std::make_unique<SharedArenaMemory>(arena_fd_, arena_bytes_);
    arena_ = std::make_unique<Arena>("lane " + name, arena_bytes_, *arena_memory_);
    options_ = LaneOptions(name, j.at("options").get<std::map<std::string, std::string>>(), j.at("source"));
    ctx_.reset(new LaneContext{*backend_, *stream_, *arena_, options_, j.at("output_dir"), j.at("rank").get<int>(),
                               j.at("seed").get<std::uint64_t>(), j.at("world_size").get<int>(),
                               j.at("instance_index").get<int>(), j.at("instance_count").get<int>()});
    allow_children_ = j.at("allow_children").get<bool>();
    const std::uint64_t output_bytes = j.at("output_bytes").get<std::uint64_t>();
    output_quota_ = OutputQuota(ctx_->output_dir, output_bytes);
    // From here on the kernel holds the lane to its memory and file quotas: the arena is sealed at
    // its size, and the lane's own allocations (malloc, thread stacks, libraries it loads) get the
    // quota again, but never less than kMinAllowance: stdio and a few threads need that much.
    constexpr std::uint64_t kMinAllowance = std::uint64_t{64} << 20;
    allowance_ = std::max<std::uint64_t>(arena_bytes_, kMinAllowance);
    const std::uint64_t address_space = virtual_memory_bytes() + allowance_;
    set_limit(RLIMIT_AS, address_space, "its address-space limit");
    if (output_bytes > 0) set_limit(RLIMIT_FSIZE, output_bytes, "its file-size limit");
    baseline_rss_ = peak_rss_bytes();
    lane_->setup(*ctx_);
    output_quota_.check(true);
    mark_ = cpu_mark();
    return nlohmann::json{{"finished", lane_->finished()},
                          {"address_space_bytes", address_space},
                          {"seccomp", seccomp_error_.empty() ? "enforced" : seccomp_error_}}
        .dump();
  }

  WorkerFrame step() {
    Lane& l = lane();
    timer_.start();
    WorkerStepResult result;
    result.units = l.step(*ctx_);
    result.finished = l.finished() ? 1 : 0;
    LaneStepCost cost = timer_.stop();
    charge_own_threads(cost);
    result.wall_s = cost.wall_s;
    result.cpu_s = cost.cpu_s;
    result.involuntary_switches = cost.involuntary_switches;
    result.waiting_s = cost.waiting_s;
    const std::uint64_t rss = peak_rss_bytes();
    result.memory_bytes = std::max<std::uint64_t>(arena_->high_water(), rss > baseline_rss_ ? rss - baseline_rss_ : 0);
    if (!allow_children_) {
      const std::vector<pid_t> left = live_descendants(::getpid());
      if (!left.empty()) {
        const std::string first = describe_process(left.front());
        const int killed = kill_descendants(::getpid());
        throw LaneError("its step left " + std::to_string(killed) + " process(es) running (" + first +
                        "); a plugin lane may not leave processes behind, so they were killed");
      }
    }
    output_quota_.check(result.finished != 0);  // a finished lane is not stepped again: last look
    return ok(std::string(reinterpret_cast<const char*>(&result), sizeof result));
  }

  int arena_fd_;
  std::string seccomp_error_;  // "" when the system-call filter is in place
  std::unique_ptr<SharedArenaMemory> arena_memory_;
  std::uint64_t arena_bytes_ = 0;
  std::uint64_t allowance_ = 0;  // address space for what the lane allocates outside its arena
  std::unique_ptr<Lane> lane_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Arena> arena_;
  LaneOptions options_;
  std::unique_ptr<LaneContext> ctx_;
  bool allow_children_ = false;
  OutputQuota output_quota_;
  // What the lane's other threads (one it left spinning, say) took while this one served the call,
  // before the step (the request waited behind them: the hand-over the trainer sees) and during it.
  // Between calls the worker is frozen, so that is their CPU time since the last step ended, less
  // this thread's (charge_other_threads in step_timer.h says what the step is charged for it).
  void charge_own_threads(LaneStepCost& cost) {
    const CpuMark now = cpu_mark();
    const double others = std::max(0.0, (now.process_s - mark_.process_s) - (now.thread_s - mark_.thread_s));
    mark_ = now;
    cost = charge_other_threads(cost, others, threads_);
  }
  struct CpuMark {
    double process_s = 0, thread_s = 0;
  };
  static CpuMark cpu_mark() {
    auto seconds = [](clockid_t clock) {
      timespec ts{};
      clock_gettime(clock, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    return {seconds(CLOCK_PROCESS_CPUTIME_ID), seconds(CLOCK_THREAD_CPUTIME_ID)};
  }
  CpuMark mark_;  // at the end of setup and of every step

  StepTimer timer_;
  int threads_ = 1;
  std::uint64_t baseline_rss_ = 0;
};

int serve(const WorkerArgs& args) {
  // Before any of the lane's code is loaded, and inherited by everything it starts.
  WorkerSession session(args.arena_fd, install_lane_seccomp_filter());
  for (;;) {
    WorkerFrame request;
    if (read_frame(args.socket_fd, &request) != FrameStatus::Ok) return 0;  // the trainer is done
    const WorkerFrame reply = session.handle(request);
    if (!write_frame(args.socket_fd, reply.op, reply.payload, request.sequence)) return 0;
  }
}

// lane-worker --join-cgroup FILE ... --exec PROGRAM ARGS...: writes this process's pid into each
// cgroup.procs FILE, then becomes PROGRAM (bwrap, or the worker itself), so the lane's first
// instruction already runs inside its limits.
int join_cgroups_and_exec(int argc, char** argv) {
  int i = 1;
  for (; i + 1 < argc && std::strcmp(argv[i], "--join-cgroup") == 0; i += 2) {
    FILE* procs = std::fopen(argv[i + 1], "w");
    if (!procs || std::fprintf(procs, "%d\n", static_cast<int>(::getpid())) < 0 || std::fclose(procs) != 0) {
      std::fprintf(stderr, "pipelane lane-worker: cannot join the cgroup %s: %s\n", argv[i + 1], std::strerror(errno));
      return 5;
    }
  }
  if (i >= argc || std::strcmp(argv[i], "--exec") != 0 || i + 1 >= argc) return 2;
  ::execv(argv[i + 1], argv + i + 1);
  std::fprintf(stderr, "pipelane lane-worker: cannot run %s: %s\n", argv[i + 1], std::strerror(errno));
  return 6;
}

}  // namespace

int run_lane_worker(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--join-cgroup") == 0 || std::strcmp(argv[1], "--exec") == 0))
    return join_cgroups_and_exec(argc, argv);
  WorkerArgs args;
  if (!parse_args(argc, argv, &args)) {
    std::fprintf(stderr, "pipelane lane-worker: runs one isolated lane for `pipelane train`; it is not meant to be "
                         "started by hand\n");
    return 2;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (args.parent > 0 && ::getppid() != args.parent) return 3;  // the trainer is already gone
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (!args.describe.empty()) return describe(args.describe);
  const pid_t keeper = ::getpid();
  const pid_t lane = ::fork();  // early: one thread, nothing of the lane loaded yet
  if (lane < 0) {
    std::perror("pipelane lane-worker: fork");
    return 4;
  }
  if (lane > 0) return keep(lane, args);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != keeper) ::_exit(3);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::close(args.status_fd);
  return serve(args);
}

}  // namespace pipelane
