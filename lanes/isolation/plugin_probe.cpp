#include "lanes/isolation/plugin_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "lanes/isolation/process_tree.h"
#include "lanes/isolation/spawn_worker.h"
#include "lanes/lane.h"

namespace pipelane {

PluginDescription describe_plugin_in_worker(const std::string& path, const std::vector<std::string>& worker_command,
                                            double deadline_s) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw LaneError(path + ": pipe2: " + std::strerror(errno));
  WorkerSpawn spawn;
  spawn.argv = worker_command;
  spawn.argv.insert(spawn.argv.end(), {"--describe", path, "--parent", std::to_string(::getpid())});
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
    throw LaneError(path + ": the lane worker loading it " + describe_wait_status(status) + " without describing it");
  return {answer["name"].get<std::string>(), answer["work_unit"].get<std::string>()};
}

}  // namespace pipelane
