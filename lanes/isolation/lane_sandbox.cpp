#include "lanes/isolation/lane_sandbox.h"

#include <filesystem>

namespace pipelane {
namespace {

namespace fs = std::filesystem;

bool under(const std::string& path, const std::string& dir) {
  if (dir.empty()) return false;
  const fs::path p = fs::path(path).lexically_normal(), d = fs::path(dir).lexically_normal();
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // a trailing slash
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

// bwrap resolves a relative path against the new root, not this process's directory (a run
// directory is often relative: runs/pp2).
std::string absolute(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  return (ec ? fs::path(path) : p).lexically_normal().string();
}

}  // namespace

std::vector<std::string> bwrap_arguments(const SandboxRequest& request) {
  SandboxRequest r = request;
  r.output_dir = r.output_dir.empty() ? "" : absolute(r.output_dir);
  r.hidden_dir = r.hidden_dir.empty() ? "" : absolute(r.hidden_dir);
  for (std::string& path : r.readable_paths) path = absolute(path);
  std::vector<std::string> a = {r.bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                                "--unshare-cgroup-try"};
  if (!r.network) a.push_back("--unshare-net");
  // Order matters: each mount is made over the ones before it.
  for (const char* arg : {"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev",
                          "/dev", "--proc", "/proc", "--tmpfs", "/tmp"})
    a.emplace_back(arg);
  std::error_code ec;
  if (!r.hidden_dir.empty() && fs::is_directory(r.hidden_dir, ec)) a.insert(a.end(), {"--tmpfs", r.hidden_dir});
  for (const std::string& path : r.readable_paths) a.insert(a.end(), {"--ro-bind", path, path});
  if (!r.output_dir.empty()) a.insert(a.end(), {"--bind", r.output_dir, r.output_dir});
  a.emplace_back("--");
  return a;
}

std::vector<std::string> sandbox_layers(const SandboxRequest& r) {
  std::vector<std::string> layers = {"user namespace", "pid namespace", "mount namespace (read-only filesystem)"};
  layers.emplace_back(r.network ? "host network (asked for)" : "network namespace");
  layers.emplace_back("no capabilities");
  return layers;
}

std::vector<std::string> hidden_option_paths(const std::vector<std::string>& values, const std::string& hidden_dir) {
  std::vector<std::string> paths;
  for (const std::string& v : values) {
    if (v.empty() || v[0] != '/' || v.size() > 4096) continue;
    std::error_code ec;
    if (!fs::exists(v, ec) || ec) continue;
    if (under(v, "/tmp") || (!hidden_dir.empty() && under(v, absolute(hidden_dir))))
      paths.push_back(fs::path(v).lexically_normal().string());
  }
  return paths;
}

}  // namespace pipelane
