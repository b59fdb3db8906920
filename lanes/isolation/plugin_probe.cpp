#include "lanes/isolation/plugin_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "lanes/isolation/lane_sandbox.h"
#include "lanes/isolation/process_tree.h"
#include "lanes/isolation/spawn_worker.h"
#include "lanes/lane.h"

namespace pipelane {

PluginDescription describe_plugin_once(const std::string& path, const std::vector<std::string>& argv,
                                       double deadline_s);

namespace {

// The describing worker runs the plugin's create() too: in the lanes' sandbox where there is one.
std::vector<std::string> probe_argv(const std::string& path, const std::vector<std::string>& worker_command,
                                    bool sandboxed) {
  std::vector<std::string> argv;
  if (sandboxed) {
    SandboxRequest request;
    request.readable_paths = hidden_option_paths({path, worker_command.front()}, "");
    argv = bwrap_arguments(request);
  }
  argv.insert(argv.end(), worker_command.begin(), worker_command.end());
  argv.insert(argv.end(), {"--describe", path, "--parent", sandboxed ? "0" : std::to_string(::getpid())});
  return argv;
}

}  // namespace

PluginDescription describe_plugin_in_worker(const std::string& path, const std::vector<std::string>& worker_command,
                                            double deadline_s) {
  const bool sandboxed = ::access(SandboxRequest().bwrap.c_str(), X_OK) == 0;
  try {
    return describe_plugin_once(path, probe_argv(path, worker_command, sandboxed), deadline_s);
  } catch (const LaneError& error) {
    // bwrap refused the namespaces here (lanes say so when they start): describe it without them.
    if (!sandboxed || std::string(error.what()).find("bwrap: ") == std::string::npos) throw;
    return describe_plugin_once(path, probe_argv(path, worker_command, false), deadline_s);
  }
}

PluginDescription describe_plugin_once(const std::string& path, const std::vector<std::string>& argv,
                                       double deadline_s) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw LaneError(path + ": pipe2: " + std::strerror(errno));
  WorkerSpawn spawn;
  spawn.argv = argv;
  spawn.output_fd = out[1];
  pid_t pid = -1;
  try {
    pid = spawn_worker(spawn);
  } catch (const LaneError& error) {
    ::close(out[0]);
    ::close(out[1]);
    throw LaneError(path + ": " + error.what());
  }
  ::close(out[1]);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    char buffer[4096];
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < (1u << 20)) text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  const int status = kill_process_tree(pid);
  if (timed_out)
    throw LaneError(path + ": the lane worker describing it did not answer within " + std::to_string(int(deadline_s)) +
                    " s and was killed");
  // The answer is the last line (a plugin may print while it loads).
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const auto newline = text.find_last_of('\n');
  const nlohmann::json answer =
      nlohmann::json::parse(newline == std::string::npos ? text : text.substr(newline + 1), nullptr, false);
  if (answer.is_object() && answer.contains("error") && answer["error"].is_string())
    throw LaneError(answer["error"].get<std::string>());
  if (!answer.is_object() || !answer.contains("name") || !answer["name"].is_string() ||
      !answer.contains("work_unit") || !answer["work_unit"].is_string())
    throw LaneError(path + ": the lane worker loading it " + describe_wait_status(status) + " without describing it" +
                    (text.rfind("bwrap: ", 0) == 0 ? " (" + text.substr(0, 200) + ")" : ""));
  return {answer["name"].get<std::string>(), answer["work_unit"].get<std::string>()};
}

}  // namespace pipelane
