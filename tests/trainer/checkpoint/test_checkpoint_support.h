// Helpers for the checkpoint tests: run pipelane, read metrics rows exactly as written, and
// compare two checkpoints tensor by tensor.
#pragma once
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"
#include "trainer/checkpoint/checkpoint.h"

namespace pipelane::test_support {

// A config small enough that a step takes milliseconds; 4 layers so pp 2 and tp 2 both work.
inline std::string tiny_checkpoint_config(const std::string& data, int steps, int every) {
  return "[model]\nlayers = 4\nd_model = 32\nheads = 4\nseq_len = 16\nvocab_size = 256\n"
         "[train]\nmicro_batch = 2\nglobal_batch = 8\nsteps = " + std::to_string(steps) +
         "\nwarmup_steps = 2\neval_every = 0\nthreads = 1\npeak_gflops = 100\nseed = 11\n"
         "[data]\npath = " + data + "\n[run]\nlog_every = 1\ncheckpoint_every = " + std::to_string(every) + "\n";
}

// The "loss" field of every step row, as the text JSON wrote (exact comparison), by step.
inline std::vector<std::string> loss_texts(const std::string& run_dir) {
  std::vector<std::string> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (!row.contains("loss")) continue;
    const int step = row["step"].get<int>();
    if (static_cast<int>(out.size()) < step) out.resize(step);
    out[step - 1] = row["loss"].dump();
  }
  return out;
}

// `command` run by /bin/sh in a child whose files may not grow past `max_file_bytes`
// (RLIMIT_FSIZE, SIGXFSZ ignored): a write past it fails with EFBIG, as a full disk fails with
// ENOSPC, without needing a small file system. Output comes back through a pipe, which the limit
// does not apply to.
inline JobResult run_with_file_size_limit(const std::string& command, std::uint64_t max_file_bytes) {
  int out[2];
  if (pipe(out) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit limit{max_file_bytes, max_file_bytes};
    setrlimit(RLIMIT_FSIZE, &limit);
    std::signal(SIGXFSZ, SIG_IGN);  // ignored signals stay ignored across exec
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    close(out[1]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  JobResult r;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) r.output.append(buf, static_cast<std::size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// How many error lines pipelane train printed (lines starting "pipelane train:" other than its
// "N layers, d_model ..." header): a failure is exactly one.
inline int train_message_lines(const std::string& output) {
  int n = 0;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("pipelane train:", 0) == 0 && line.find(" layers, d_model ") == std::string::npos) ++n;
  return n;
}

// Paths under `dir` whose names end in `suffix` (".tmp", ".saving").
inline std::vector<std::string> paths_ending_in(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& item : std::filesystem::recursive_directory_iterator(dir, ec)) {
    const std::string p = item.path().string();
    if (p.size() >= suffix.size() && p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0) out.push_back(p);
  }
  return out;
}

// Every tensor (params and both moments) equal, bit for bit.
inline void expect_same_tensors(const std::string& a_dir, const std::string& b_dir) {
  CheckpointReader a(a_dir), b(b_dir);
  EXPECT_EQ(a.step(), b.step());
  const auto names = a.tensor_names();
  ASSERT_FALSE(names.empty());
  for (const char* group : {"params", "adam_m", "adam_v"})
    for (const std::string& n : names) {
      std::vector<std::int64_t> sa, sb;
      const auto ta = a.full_tensor(group, n, &sa);
      const auto tb = b.full_tensor(group, n, &sb);
      ASSERT_EQ(sa, sb) << group << "/" << n;
      ASSERT_EQ(ta.size(), tb.size());
      EXPECT_EQ(0, std::memcmp(ta.data(), tb.data(), ta.size() * sizeof(float))) << group << "/" << n;
    }
}

}  // namespace pipelane::test_support
