#include "lanes/isolation/process_lane.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "lanes/isolation/lane_sandbox.h"
#include "lanes/isolation/process_tree.h"
#include "lanes/isolation/spawn_worker.h"
#include "lanes/isolation/worker_replies.h"

namespace pipelane {
namespace {

// The fds the worker finds its socket, arena and status pipe on.
constexpr int kSocketFd = 3, kArenaFd = 4, kStatusFd = 5;

// The keeper's report of the lane process's end (lanes/isolation/lane_worker.cpp).
struct LaneProcessEnd {
  int status = 0;
  long peak_rss_kb = 0;
};

[[noreturn]] void fail_errno(const std::string& what) {
  throw LaneError("lane worker: " + what + ": " + std::strerror(errno));
}

// A descriptor that closes itself.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  void reset(int f = -1) {
    if (fd >= 0) ::close(fd);
    fd = f;
  }
  int release() {
    const int f = fd;
    fd = -1;
    return f;
  }
};

// The last non-empty line of a log, printable and short, for a crash message.
std::string last_line_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 4096 ? size - 4096 : 0;
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r' || tail.back() == ' ')) tail.pop_back();
  const auto newline = tail.find_last_of('\n');
  std::string line = newline == std::string::npos ? tail : tail.substr(newline + 1);
  std::string out;
  for (unsigned char c : line) {
    if (out.size() >= 160) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c);
    else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

ProcessLane::ProcessLane(std::string name, std::string work_unit, LaneWorkerLaunch launch)
    : name_(std::move(name)), work_unit_(std::move(work_unit)), launch_(std::move(launch)) {
  if (launch_.command.empty()) throw LaneError("lane '" + name_ + "': isolation = process needs a worker command");
}

ProcessLane::~ProcessLane() { end_worker(); }

std::vector<std::string> ProcessLane::worker_argv(bool with_namespaces, const LaneContext& ctx) const {
  std::vector<std::string> argv;
  // Joining the cgroups first (then exec), so nothing of the worker runs outside them.
  if (!cgroup_.procs_files().empty()) {
    argv = launch_.command;
    for (const std::string& file : cgroup_.procs_files()) argv.insert(argv.end(), {"--join-cgroup", file});
    argv.emplace_back("--exec");
  }
  if (with_namespaces) {
    SandboxRequest request;
    request.bwrap = launch_.bwrap;
    request.output_dir = ctx.output_dir;
    request.hidden_dir = launch_.hidden_dir;
    request.network = launch_.network;
    std::vector<std::string> values = {launch_.plugin_path, launch_.command.front()};  // its own code, too
    for (const auto& [key, value] : ctx.options.values()) values.push_back(value);
    request.readable_paths = hidden_option_paths(values, launch_.hidden_dir);
    const std::vector<std::string> bwrap = bwrap_arguments(request);
    argv.insert(argv.end(), bwrap.begin(), bwrap.end());
  }
  argv.insert(argv.end(), launch_.command.begin(), launch_.command.end());
  for (const char* a : {"--socket-fd", "3", "--arena-fd", "4", "--status-fd", "5", "--parent"}) argv.emplace_back(a);
  // In a PID namespace the worker's parent is bwrap's init, which dies with the trainer.
  argv.push_back(with_namespaces ? "0" : std::to_string(::getpid()));
  return argv;
}

void ProcessLane::spawn(const LaneContext& ctx, bool with_namespaces) {
  const std::size_t arena_bytes = ctx.arena.capacity();
  // The arena: shared memory of exactly the quota, sealed so neither side can grow it.
  Fd memfd(::memfd_create(("pipelane-lane-" + name_).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (memfd.fd < 0) fail_errno("memfd_create");
  if (::ftruncate(memfd.fd, static_cast<off_t>(arena_bytes)) != 0) fail_errno("ftruncate of the arena");
  if (::fcntl(memfd.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) fail_errno("sealing the arena");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fail_errno("socketpair");
  Fd mine(sv[0]), theirs(sv[1]);
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) fail_errno("pipe2");
  Fd status_read(status_pipe[0]), status_write(status_pipe[1]);

  log_path_ = ctx.output_dir.empty() ? "/dev/null" : ctx.output_dir + "/worker.log";
  WorkerSpawn spawn;
  spawn.argv = worker_argv(with_namespaces, ctx);
  spawn.fds = {{theirs.fd, kSocketFd}, {memfd.fd, kArenaFd}, {status_write.fd, kStatusFd}};
  spawn.output_path = log_path_;
  spawn.threads = launch_.threads;
  pid_t pid = -1;
  try {
    pid = spawn_worker(spawn);
  } catch (const LaneError& error) {
    throw LaneError("lane '" + name_ + "': " + error.what());
  }
  keeper_ = pid;
  socket_ = mine.release();
  status_fd_ = status_read.release();
  gone_ = false;
}

void ProcessLane::end_worker() const {
  cgroup_.open_cpu();  // killed processes need the CPU to exit
  if (keeper_ > 0) kill_process_tree(keeper_);
  keeper_ = -1;
  if (socket_ >= 0) ::close(socket_);
  if (status_fd_ >= 0) ::close(status_fd_);
  socket_ = status_fd_ = -1;
  gone_ = true;
}

void ProcessLane::worker_ended(const char* what) const {
  // The keeper reports the lane process's end at once; a short wait covers the race with EOF.
  LaneProcessEnd end;
  bool known = false;
  pollfd p{status_fd_, POLLIN, 0};
  if (::poll(&p, 1, 1000) > 0 && ::read(status_fd_, &end, sizeof end) == static_cast<ssize_t>(sizeof end))
    known = true;
  const pid_t pid = keeper_;
  end_worker();
  std::string message = std::string(what) + ": its worker process (" + std::to_string(pid) + ") ";
  if (known) {
    message += describe_wait_status(end.status);
    message += "; peak memory " + mib(static_cast<std::uint64_t>(end.peak_rss_kb) * 1024);
    if (address_space_bytes_ > 0) message += " (address space capped at " + mib(address_space_bytes_) + ")";
  } else {
    message += "closed its connection to the trainer and was killed";
  }
  const std::string last = last_line_of(log_path_);
  if (!last.empty()) message += "; its last output: \"" + last + "\"";
  throw LaneCrash(message);
}

std::string ProcessLane::memory_limit_text() const {
  return "its memory limit (cgroup memory " + mib(memory_limit_bytes_) +
         ": the arena, as much again for its own allocations, and the worker's code; shared memory, memfd "
         "and tmpfs pages count)";
}

void ProcessLane::check_cgroup_limits(const char* what) const {
  const LaneCgroupEvents e = cgroup_.events();
  std::string limit;
  // Only a kill counts: the limit being reached alone (failcnt) also happens when the kernel
  // reclaims a lane's page cache there, which is no fault.
  if (e.oom_kills > 0)
    limit = memory_limit_text();
  else if (e.pids_refused > 0)
    limit = "its process limit (cgroup pids.max = " + std::to_string(launch_.pids_max) + ")";
  if (limit.empty()) return;
  end_worker();
  throw LaneError(std::string(what) + ": the lane reached " + limit + "; its worker and everything it started were killed");
}

std::string ProcessLane::request(WorkerOp op, const std::string& payload, double deadline_s, const char* what) const {
  if (gone_ || socket_ < 0) throw LaneError(std::string(what) + ": the lane's worker is not running");
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (deadline_s > 0)
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(deadline_s));
  // The worker gets its cores only while it serves a call.
  struct CpuWindow {
    const LaneCgroup& cgroup;
    explicit CpuWindow(const LaneCgroup& c) : cgroup(c) { cgroup.open_cpu(); }
    ~CpuWindow() { cgroup.close_cpu(); }
  } window(cgroup_);
  const std::uint32_t sequence = ++sequence_;
  if (!write_frame(socket_, op, payload, sequence)) {
    check_cgroup_limits(what);
    worker_ended(what);
  }
  WorkerFrame reply;
  const FrameStatus status = read_frame(socket_, &reply, deadline, max_reply_bytes(op, limits_.state_bytes), status_fd_);
  if (status != FrameStatus::Ok) check_cgroup_limits(what);
  auto refuse = [&](const std::string& why) {
    end_worker();
    throw LaneCrash(std::string(what) + ": its worker sent " + why + " and was killed");
  };
  switch (status) {
    case FrameStatus::Ok: break;
    case FrameStatus::Closed: worker_ended(what);
    case FrameStatus::Timeout: {
      const pid_t pid = keeper_;
      // A worker that filled its memory to the limit may sit in the kernel's reclaim past its
      // deadline before the OOM killer comes (shared memory cannot be reclaimed without swap): say
      // that it was at its limit, read before the kill frees its pages.
      const LaneCgroupEvents e = cgroup_.events();
      const bool at_limit = memory_limit_bytes_ > 0 && e.memory_failures > 0 &&
                            e.memory_peak + (std::uint64_t{1} << 20) >= memory_limit_bytes_;
      end_worker();
      char text[256];
      std::snprintf(text, sizeof text,
                    "%s did not return within its deadline of %.3g s: its worker process (%d) and everything it "
                    "started were killed",
                    what, deadline_s, static_cast<int>(pid));
      throw LaneTimeout(std::string(text) + (at_limit ? "; it had reached " + memory_limit_text() : ""));
    }
    case FrameStatus::TooLarge:
      if (op == WorkerOp::Save && limits_.state_bytes > 0) {
        end_worker();
        throw LaneError("save() returned " + std::to_string(reply.claimed_size) + " bytes, more than [lanes] state_mb (" +
                        mib(limits_.state_bytes) + "); the checkpoint is written without the lane's state");
      }
      refuse("a frame of " + std::to_string(reply.claimed_size) + " bytes (at most " +
             std::to_string(max_reply_bytes(op, limits_.state_bytes)) + " answer this request)");
      [[fallthrough]];  // refuse() does not return
    case FrameStatus::Malformed: refuse("a malformed reply");
  }
  // One reply per request, to the request asked.
  if (reply.sequence != sequence) refuse("a reply to another request");
  if (has_unread_bytes(socket_)) refuse("more than one reply");
  check_cgroup_limits(what);
  if (reply.op == WorkerOp::Ok) return std::move(reply.payload);
  if (reply.op != WorkerOp::Fail) refuse("an unexpected reply");
  const std::optional<WorkerFailureReply> failure = parse_failure(reply.payload);
  if (!failure) refuse("a failure of no known kind");
  if (failure->kind == WorkerFailure::Quota) throw ArenaQuotaError(failure->message);
  if (failure->kind == WorkerFailure::Lane || failure->kind == WorkerFailure::Memory) throw LaneError(failure->message);
  throw std::runtime_error(failure->message);
}

void ProcessLane::describe_sandbox(bool with_namespaces, const std::string& namespaces_missing,
                                   const std::string& seccomp) {
  SandboxRequest request;
  request.network = launch_.network;
  nlohmann::json layers = with_namespaces ? nlohmann::json(sandbox_layers(request)) : nlohmann::json::array();
  sandbox_ = {{"namespaces", layers}, {"cgroups", cgroup_.enforced()}, {"seccomp", seccomp}};
  std::string missing;
  auto add = [&](const std::string& layer, const std::string& why) {
    sandbox_["missing"][layer] = why;
    missing += (missing.empty() ? "" : "; ") + layer + ": " + why;
  };
  if (!with_namespaces) add("namespaces", namespaces_missing);
  if (!cgroup_.missing().empty()) add("cgroups", cgroup_.missing());
  if (seccomp != "enforced") add("seccomp", seccomp);
  sandbox_["degraded"] = !missing.empty();
  // Said once, at the start, where it is seen: the lane runs with the layers that work.
  if (!missing.empty())
    std::fprintf(stderr, "pipelane: lane '%s': sandbox degraded, running without %s\n", name_.c_str(), missing.c_str());
}

void ProcessLane::setup(LaneContext& ctx) {
  if (keeper_ > 0 || gone_) throw LaneError("lane '" + name_ + "': setup() called twice");
  const std::uint64_t arena = ctx.arena.capacity();
  memory_limit_bytes_ = arena + std::max<std::uint64_t>(arena, std::uint64_t{64} << 20) + launch_.worker_memory_bytes;
  if (launch_.cgroups) {
    char unique[64];
    std::snprintf(unique, sizeof unique, "pipelane-%d-%p-", static_cast<int>(::getpid()), static_cast<void*>(this));
    cgroup_ = LaneCgroup(unique + name_, {memory_limit_bytes_, launch_.pids_max, launch_.threads, launch_.cpus});
  }
  std::string namespaces_missing = "not asked for (no sandbox program)";
  bool with_namespaces = !launch_.bwrap.empty();
  if (with_namespaces && ::access(launch_.bwrap.c_str(), X_OK) != 0) {
    namespaces_missing = launch_.bwrap + " cannot be run (Debian package bubblewrap): " + std::strerror(errno);
    with_namespaces = false;
  }
  spawn(ctx, with_namespaces);
  const nlohmann::json args = {
      {"lane", name_},
      {"plugin", launch_.plugin_path},
      {"options", ctx.options.values()},
      {"source", ctx.options.source()},
      {"output_dir", ctx.output_dir},
      {"rank", ctx.rank},
      {"seed", ctx.seed},
      {"world_size", ctx.world_size},
      {"instance_index", ctx.instance_index},
      {"instance_count", ctx.instance_count},
      {"arena_bytes", ctx.arena.capacity()},
      {"output_bytes", limits_.output_bytes},
      {"threads", launch_.threads},
      {"allow_children", launch_.allow_child_processes},
  };
  std::string text;
  try {
    text = request(WorkerOp::Setup, args.dump(), limits_.call_deadline_s, "setup");
  } catch (const LaneCrash&) {
    // bwrap refused to make the namespaces (no user namespaces, a container): the worker never
    // ran. Without them, then, and said so.
    const std::string last = last_line_of(log_path_);
    if (!with_namespaces || last.rfind("bwrap:", 0) != 0) throw;
    namespaces_missing = last;
    with_namespaces = false;
    spawn(ctx, false);
    text = request(WorkerOp::Setup, args.dump(), limits_.call_deadline_s, "setup");
  }
  const nlohmann::json reply = nlohmann::json::parse(text, nullptr, false);
  if (!reply.is_object() || !reply.contains("finished") || !reply["finished"].is_boolean() ||
      !reply.contains("address_space_bytes") || !reply["address_space_bytes"].is_number_unsigned() ||
      !reply.contains("seccomp") || !reply["seccomp"].is_string()) {
    end_worker();
    throw LaneCrash("setup: its worker sent a malformed reply and was killed");
  }
  finished_ = reply["finished"].get<bool>();
  address_space_bytes_ = reply["address_space_bytes"].get<std::uint64_t>();
  describe_sandbox(with_namespaces, namespaces_missing, reply["seccomp"].get<std::string>().substr(0, 200));
  last_report_ = {{"sandbox", sandbox_}};
}

double ProcessLane::step(LaneContext&) {
  const std::string payload = request(WorkerOp::Step, "", limits_.step_deadline_s, "step");
  WorkerStepResult result;
  const std::string invalid = invalid_step_result(payload, memory_limit_bytes_, &result);
  if (!invalid.empty()) {
    end_worker();
    throw LaneCrash("step: its worker sent " + invalid + " and was killed");
  }
  if (finished_ && result.finished == 0) {  // a finished lane is not stepped again: it cannot unfinish
    end_worker();
    throw LaneCrash("step: its worker said a finished lane is not finished and was killed");
  }
  finished_ = result.finished != 0;
  cost_ = {result.wall_s, result.cpu_s, static_cast<long>(result.involuntary_switches), result.waiting_s};
  memory_high_water_ = std::max<std::size_t>(memory_high_water_, result.memory_bytes);
  return result.units;
}

std::string ProcessLane::save() const { return request(WorkerOp::Save, "", limits_.call_deadline_s, "save"); }

void ProcessLane::load(const std::string& state) {
  const nlohmann::json reply =
      nlohmann::json::parse(request(WorkerOp::Load, state, limits_.call_deadline_s, "load"), nullptr, false);
  if (!reply.is_object() || !reply.contains("finished") || !reply["finished"].is_boolean()) {
    end_worker();
    throw LaneCrash("load: its worker sent a malformed reply and was killed");
  }
  finished_ = reply["finished"].get<bool>();
}

// The lane's report, with what its sandbox enforced.
nlohmann::json ProcessLane::report() const {
  if (gone_ || socket_ < 0) return last_report_;
  const nlohmann::json parsed =
      nlohmann::json::parse(request(WorkerOp::Report, "", limits_.call_deadline_s, "report"), nullptr, false);
  last_report_ = parsed.is_object() ? parsed : nlohmann::json{{"invalid_report", true}};
  last_report_["sandbox"] = sandbox_;
  return last_report_;
}

void ProcessLane::teardown(LaneContext&) {
  if (gone_ || socket_ < 0) {
    end_worker();
    return;
  }
  try {
    const nlohmann::json parsed =
        nlohmann::json::parse(request(WorkerOp::Teardown, "", limits_.call_deadline_s, "teardown"), nullptr, false);
    if (parsed.is_object()) {
      last_report_ = parsed;
      last_report_["sandbox"] = sandbox_;
    }
  } catch (...) {
    end_worker();
    throw;
  }
  end_worker();  // and whatever the lane left running
}

}  // namespace pipelane
