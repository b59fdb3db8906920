// Launching pipelane jobs from tests: a synthetic token file, a tiny config, mpirun with the
// flags a root-run CI needs, and the metrics the job wrote.
#pragma once
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/token_store.h"
#include "tests/datasets/test_files.h"

namespace pipelane::test_support {

inline std::string build_dir() {
  const char* d = std::getenv("PIPELANE_BUILD_DIR");
  return d ? d : "build";
}

inline void write_test_corpus(const std::string& path) {
  TokenSplit train, valid;
  const std::string text = "pipeline bubbles are idle time; lanes fill them with useful work. ";
  train.doc_offsets.push_back(0);
  for (int r = 0; r < 60; ++r)
    for (unsigned char ch : text) train.tokens.push_back(ch);
  train.doc_offsets.push_back(train.tokens.size());
  valid.doc_offsets.push_back(0);
  for (int r = 0; r < 4; ++r)
    for (unsigned char ch : text) valid.tokens.push_back(ch);
  valid.doc_offsets.push_back(valid.tokens.size());
  write_token_store(path, {"byte", 256, {"test"}, ""}, train, valid);
}

inline std::string tiny_parallel_config(const std::string& data) {
  return "[model]\nlayers = 8\nd_model = 32\nheads = 4\nseq_len = 16\nvocab_size = 256\n"
         "[train]\nmicro_batch = 2\nglobal_batch = 16\nsteps = 5\nwarmup_steps = 1\n"
         "eval_every = 0\nthreads = 1\npeak_gflops = 100\nseed = 7\n"
         "[data]\npath = " + data + "\n[run]\nlog_every = 1\n";
}

struct JobResult {
  int exit_code = -1;
  double seconds = 0;
  std::string output;  // stdout and stderr together
};

// ranks == 0: a plain process, no mpirun. A job still running after timeout_s is killed (exit 124).
inline JobResult run_job(int ranks, const std::string& args, const std::string& log,
                         const std::string& env = "", int timeout_s = 300) {
  std::string cmd = env + (env.empty() ? "" : " ");
  if (ranks > 0)
    cmd += "timeout " + std::to_string(timeout_s) + " mpirun --allow-run-as-root --oversubscribe -np " +
           std::to_string(ranks) + " ";
  cmd += build_dir() + "/pipelane train " + args + " > " + log + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  JobResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream in(log);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

struct StepMetrics {
  std::vector<double> loss, grad_norm;
};

inline StepMetrics read_metrics(const std::string& run_dir) {
  StepMetrics m;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (!row.contains("loss")) continue;
    m.loss.push_back(row["loss"].get<double>());
    m.grad_norm.push_back(row["grad_norm"].get<double>());
  }
  return m;
}

}  // namespace pipelane::test_support
