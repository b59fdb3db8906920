#include "lanes/isolation/process_lane.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "lanes/isolation/process_tree.h"
#include "lanes/isolation/spawn_worker.h"

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

void ProcessLane::spawn(const LaneContext& ctx) {
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
  spawn.argv = launch_.command;
  for (const char* a : {"--socket-fd", "3", "--arena-fd", "4", "--status-fd", "5", "--parent"}) spawn.argv.emplace_back(a);
  spawn.argv.push_back(std::to_string(::getpid()));
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

std::string ProcessLane::request(WorkerOp op, const std::string& payload, double deadline_s, const char* what) const {
  if (gone_ || socket_ < 0) throw LaneError(std::string(what) + ": the lane's worker is not running");
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (deadline_s > 0)
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(deadline_s));
  if (!write_frame(socket_, op, payload)) worker_ended(what);
  WorkerFrame reply;
  switch (read_frame(socket_, &reply, deadline)) {
    case FrameStatus::Ok: break;
    case FrameStatus::Closed: worker_ended(what);
    case FrameStatus::Timeout: {
      const pid_t pid = keeper_;
      end_worker();
      char text[256];
      std::snprintf(text, sizeof text,
                    "%s did not return within its deadline of %.3g s: its worker process (%d) and everything it "
                    "started were killed",
                    what, deadline_s, static_cast<int>(pid));
      throw LaneTimeout(text);
    }
    case FrameStatus::Malformed: {
      end_worker();
      throw LaneCrash(std::string(what) + ": its worker sent a malformed reply and was killed");
    }
  }
  if (reply.op == WorkerOp::Ok) return std::move(reply.payload);
  if (reply.op == WorkerOp::Fail && !reply.payload.empty()) {
    const auto kind = static_cast<WorkerFailure>(reply.payload[0]);
    const std::string message = reply.payload.substr(1);
    if (kind == WorkerFailure::Quota) throw ArenaQuotaError(message);
    if (kind == WorkerFailure::Lane || kind == WorkerFailure::Memory) throw LaneError(message);
    throw std::runtime_error(message);
  }
  end_worker();
  throw LaneCrash(std::string(what) + ": its worker sent an unexpected reply and was killed");
}

void ProcessLane::setup(LaneContext& ctx) {
  if (keeper_ > 0 || gone_) throw LaneError("lane '" + name_ + "': setup() called twice");
  spawn(ctx);
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
  const nlohmann::json reply =
      nlohmann::json::parse(request(WorkerOp::Setup, args.dump(), limits_.call_deadline_s, "setup"), nullptr, false);
  if (!reply.is_object() || !reply.contains("finished")) {
    end_worker();
    throw LaneCrash("setup: its worker sent a malformed reply and was killed");
  }
  finished_ = reply.value("finished", false);
  address_space_bytes_ = reply.value("address_space_bytes", std::uint64_t{0});
}

double ProcessLane::step(LaneContext&) {
  const std::string payload = request(WorkerOp::Step, "", limits_.step_deadline_s, "step");
  WorkerStepResult result;
  if (payload.size() != sizeof result) {
    end_worker();
    throw LaneCrash("step: its worker sent a malformed reply and was killed");
  }
  std::memcpy(&result, payload.data(), sizeof result);
  finished_ = result.finished != 0;
  cost_ = {result.wall_s, result.cpu_s, static_cast<long>(result.involuntary_switches), result.waiting_s};
  memory_high_water_ = std::max<std::size_t>(memory_high_water_, result.memory_bytes);
  return result.units;
}

std::string ProcessLane::save() const { return request(WorkerOp::Save, "", limits_.call_deadline_s, "save"); }

void ProcessLane::load(const std::string& state) {
  const nlohmann::json reply =
      nlohmann::json::parse(request(WorkerOp::Load, state, limits_.call_deadline_s, "load"), nullptr, false);
  finished_ = reply.is_object() && reply.value("finished", false);
}

nlohmann::json ProcessLane::report() const {
  if (gone_ || socket_ < 0) return last_report_;
  const nlohmann::json parsed =
      nlohmann::json::parse(request(WorkerOp::Report, "", limits_.call_deadline_s, "report"), nullptr, false);
  last_report_ = parsed.is_discarded() ? nlohmann::json{{"invalid_report", true}} : parsed;
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
    if (!parsed.is_discarded()) last_report_ = parsed;
  } catch (...) {
    end_worker();
    throw;
  }
  end_worker();  // and whatever the lane left running
}

}  // namespace pipelane
