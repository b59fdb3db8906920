#include "lanes/isolation/lane_cgroup.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace pipelane {
namespace {

namespace fs = std::filesystem;

constexpr long kCpuPeriodUs = 100000;
constexpr long kIdleQuotaUs = 1000;  // 1% of a core between calls (the kernel's minimum is 1 ms)

// This process's group of `controller` ("" for the v2 line), from /proc/self/cgroup.
std::string own_group(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    std::stringstream names(list);
    for (std::string name; std::getline(names, name, ',');)
      if (name == controller) return line.substr(b + 1);
    if (controller.empty() && list.empty()) return line.substr(b + 1);
  }
  return "";
}

bool has_word(const std::string& path, const std::string& word) {
  std::ifstream in(path);
  for (std::string w; in >> w;)
    if (w == word) return true;
  return false;
}

// The value after `key` in a "key value" file (memory.events, pids.events, memory.oom_control).
std::uint64_t keyed_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string k, v; in >> k >> v;)
    if (k == key) return std::strtoull(v.c_str(), nullptr, 10);
  return 0;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::uint64_t number_in(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t n = 0;
  in >> n;
  return n;
}

}  // namespace

std::string cpus_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) list += (list.empty() ? "" : ",") + std::to_string(cpu);
  return list;
}

LaneCgroup::LaneCgroup(const std::string& name, const LaneCgroupLimits& limits) : limits_(limits), name_(name) {
  for (const char* controller : {"memory", "pids", "cpu", "freezer"}) add(controller);
  if (!limits_.cpus.empty()) add("cpuset");
  open_control_files();
  // Not frozen yet: the worker starts before its first call and must get as far as waiting for it.
  set_idle_quota();
}

LaneCgroup::~LaneCgroup() {
  close_control_files();
  remove();
}

LaneCgroup::LaneCgroup(LaneCgroup&& other) noexcept { *this = std::move(other); }

LaneCgroup& LaneCgroup::operator=(LaneCgroup&& other) noexcept {
  if (this != &other) {
    close_control_files();
    remove();
    limits_ = other.limits_;
    name_ = std::move(other.name_);
    groups_ = std::move(other.groups_);
    procs_files_ = std::move(other.procs_files_);
    enforced_ = std::move(other.enforced_);
    missing_ = std::move(other.missing_);
    quota_fd_ = other.quota_fd_;
    freeze_fd_ = other.freeze_fd_;
    other.quota_fd_ = other.freeze_fd_ = -1;
    other.groups_.clear();
  }
  return *this;
}

void LaneCgroup::set(const Group& group, const std::string& file, const std::string& value) {
  std::ofstream out(group.dir + "/" + file);
  out << value;
  out.flush();
  if (!out) throw std::runtime_error("cannot write " + value + " to " + group.dir + "/" + file);
}

void LaneCgroup::add(const std::string& controller) {
  // v1: a hierarchy of its own; v2: the unified one, where the parent must delegate the controller.
  Group group{controller, "", false};
  std::string parent;
  const fs::path v1 = fs::path("/sys/fs/cgroup") / controller;
  if (fs::exists(v1 / "cgroup.procs")) {
    parent = (v1 / own_group(controller).substr(1)).string();
  } else if (controller == "freezer") {
    // v2 has no freezer controller: every group but the root has cgroup.freeze. Use the group of
    // another controller that is v2, so the one group both limits and freezes.
    for (const Group& g : groups_)
      if (g.v2) {
        groups_.push_back({controller, g.dir, true});
        enforced_.push_back(controller);
        return;
      }
  } else {
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      const fs::path candidate = fs::path(root) / own_group("").substr(1);
      if (has_word((candidate / "cgroup.subtree_control").string(), controller)) {
        parent = candidate.string();
        group.v2 = true;
        break;
      }
    }
  }
  auto skip = [&](const std::string& why) {
    missing_ += (missing_.empty() ? "" : "; ") + controller + ": " + why;
  };
  if (parent.empty()) return skip("no cgroup v1 hierarchy and not delegated in cgroup v2");
  group.dir = parent + "/" + name_;
  std::error_code ec;
  if (!fs::create_directory(group.dir, ec) || ec)
    return skip("cannot make " + group.dir + ": " + (ec ? ec.message() : "it exists"));
  try {
    if (controller == "memory" && limits_.memory_bytes > 0) {
      const std::string bytes = std::to_string(limits_.memory_bytes);
      set(group, group.v2 ? "memory.max" : "memory.limit_in_bytes", bytes);
      // Swap would let a lane past its limit at the cost of the machine's disk and time.
      if (group.v2 && fs::exists(group.dir + "/memory.swap.max")) set(group, "memory.swap.max", "0");
      if (!group.v2 && fs::exists(group.dir + "/memory.memsw.limit_in_bytes"))
        set(group, "memory.memsw.limit_in_bytes", bytes);
    }
    if (controller == "pids" && limits_.pids > 0) set(group, "pids.max", std::to_string(limits_.pids));
    if (controller == "cpu" && !group.v2) set(group, "cpu.cfs_period_us", std::to_string(kCpuPeriodUs));
    if (controller == "cpuset") {
      // A v1 cpuset group starts with no memory nodes and no cores, and takes no task until both
      // are set; the nodes are the parent's (placement of memory is not what this limits).
      if (!group.v2) set(group, "cpuset.mems", first_line(parent + "/cpuset.effective_mems"));
      set(group, "cpuset.cpus", limits_.cpus);
    }
  } catch (const std::exception& error) {
    ::rmdir(group.dir.c_str());
    return skip(error.what());
  }
  groups_.push_back(group);
  procs_files_.push_back(group.dir + "/cgroup.procs");
  enforced_.push_back(controller);
}

const LaneCgroup::Group* LaneCgroup::find(const std::string& controller) const {
  for (const Group& g : groups_)
    if (g.controller == controller) return &g;
  return nullptr;
}

void LaneCgroup::open_control_files() {
  if (const Group* g = find("cpu"))
    quota_fd_ = ::open((g->dir + (g->v2 ? "/cpu.max" : "/cpu.cfs_quota_us")).c_str(), O_WRONLY | O_CLOEXEC);
  if (const Group* g = find("freezer"))
    freeze_fd_ = ::open((g->dir + (g->v2 ? "/cgroup.freeze" : "/freezer.state")).c_str(), O_WRONLY | O_CLOEXEC);
}

void LaneCgroup::close_control_files() {
  for (int* fd : {&quota_fd_, &freeze_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

namespace {
// A control file takes one value per write(2), from its start.
void write_control(int fd, const std::string& value) {
  if (fd >= 0) (void)!::pwrite(fd, value.data(), value.size(), 0);
}
}  // namespace

void LaneCgroup::open_cpu() const {
  freeze(false);
  const Group* g = find("cpu");
  if (!g) return;
  const long quota = kCpuPeriodUs * std::max(1, limits_.threads);
  write_control(quota_fd_, g->v2 ? std::to_string(quota) + " " + std::to_string(kCpuPeriodUs) : std::to_string(quota));
}

void LaneCgroup::close_cpu() const {
  set_idle_quota();
  freeze(true);
}

void LaneCgroup::set_idle_quota() const {
  const Group* g = find("cpu");
  if (!g) return;
  write_control(quota_fd_, g->v2 ? std::to_string(kIdleQuotaUs) + " " + std::to_string(kCpuPeriodUs)
                                 : std::to_string(kIdleQuotaUs));
}

// Asynchronous both ways: the kernel stops or wakes the tasks as they next run; nothing waits here.
void LaneCgroup::freeze(bool frozen) const {
  const Group* g = find("freezer");
  if (!g) return;
  write_control(freeze_fd_, g->v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED"));
}

LaneCgroupEvents LaneCgroup::events() const {
  LaneCgroupEvents e;
  if (const Group* g = find("memory")) {
    if (g->v2) {
      e.oom_kills = keyed_value(g->dir + "/memory.events", "oom_kill");
      e.memory_failures = keyed_value(g->dir + "/memory.events", "max");
      e.memory_peak = number_in(g->dir + "/memory.peak");
    } else {
      e.oom_kills = keyed_value(g->dir + "/memory.oom_control", "oom_kill");
      e.memory_failures = number_in(g->dir + "/memory.failcnt");
      const bool memsw = fs::exists(g->dir + "/memory.memsw.max_usage_in_bytes");
      e.memory_peak = number_in(g->dir + (memsw ? "/memory.memsw.max_usage_in_bytes" : "/memory.max_usage_in_bytes"));
    }
  }
  if (const Group* g = find("pids")) e.pids_refused = keyed_value(g->dir + "/pids.events", "max");
  return e;
}

void LaneCgroup::remove() {
  for (const Group& g : groups_) {
    // The last processes may still be exiting: a group with tasks cannot be removed.
    for (int i = 0; i < 200 && ::rmdir(g.dir.c_str()) != 0 && errno == EBUSY; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  groups_.clear();
}

}  // namespace pipelane
