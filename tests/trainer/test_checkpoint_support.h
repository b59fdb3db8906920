// Helpers for the checkpoint tests: run pipelane, read metrics rows exactly as written, and
// compare two checkpoints tensor by tensor.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/mpi_job.h"
#include "trainer/checkpoint.h"

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
