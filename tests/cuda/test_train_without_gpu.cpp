// `pipelane train --runtime.backend=cuda` on a machine without a usable GPU (this CI machine: no
// driver; or a build without nvcc: no library): one line on stderr naming the reason, a non-zero
// exit code, and no run directory at all. Runs the real executable, which finds the CUDA backend
// library beside itself.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "datasets/token_store.h"
#include "tests/datasets/test_files.h"

namespace pipelane::cuda_test {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code;
  std::string out, err;
};

Outcome run(const std::string& args, const test_support::TempDir& dir) {
  const char* build = std::getenv("PIPELANE_BUILD_DIR");
  const std::string exe = std::string(build ? build : "build") + "/pipelane";
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  const int status = std::system((exe + " " + args + " >" + out + " 2>" + err).c_str());
  const auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

void write_data(const std::string& path) {
  TokenSplit train, valid;
  train.doc_offsets.push_back(0);
  for (int i = 0; i < 4000; ++i) train.tokens.push_back(static_cast<std::uint16_t>(i % 97));
  train.doc_offsets.push_back(train.tokens.size());
  valid.doc_offsets.push_back(0);
  for (int i = 0; i < 400; ++i) valid.tokens.push_back(static_cast<std::uint16_t>(i % 89));
  valid.doc_offsets.push_back(valid.tokens.size());
  write_token_store(path, {"byte", 256, {"test"}}, train, valid);
}

const std::string kTinyRun =
    " --model.layers=2 --model.d_model=32 --model.heads=2 --model.seq_len=16 --train.steps=2 --train.warmup_steps=1";

TEST(TrainWithoutGpu, CudaBackendStopsWithOneLineAndNoRunDirectory) {
  test_support::TempDir dir;
  if (run("devices", dir).out.find("\ncuda:0: ") != std::string::npos) GTEST_SKIP() << "this machine has a GPU";
  write_data(dir.file("data.h5"));
  // Also with the GPU-only options: they are accepted for the cuda backend, and the run still
  // stops at the missing device.
  for (const std::string extra : {"", " --model.attention=cudnn --train.precision=bf16 --lanes.sm_partition=8"}) {
    SCOPED_TRACE(extra);
    const std::string run_dir = dir.file("run");
    const Outcome o = run("train --runtime.backend=cuda --data.path=" + dir.file("data.h5") + " --run.dir=" + run_dir +
                              kTinyRun + extra,
                          dir);
    EXPECT_NE(o.exit_code, 0) << o.out << o.err;
    ASSERT_FALSE(o.err.empty());
    EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "more than one line:\n" << o.err;
    EXPECT_EQ(o.err.rfind("pipelane train: backend cuda:0: ", 0), 0u) << o.err;
    // The reason: no device (the library is there, the driver is not) or no library (no nvcc).
    EXPECT_TRUE(o.err.find("no device") != std::string::npos || o.err.find("has no CUDA backend") != std::string::npos)
        << o.err;
    EXPECT_FALSE(fs::exists(run_dir)) << "a run directory was created";
  }
}

// bf16 on the CPU backend (oneDNN bf16 GEMMs or their emulation, runtime/backend.h): it trains, says so
// in the backend's name, and its losses are not fp32's.
TEST(TrainWithoutGpu, Bf16OnTheCpuBackendTrains) {
  test_support::TempDir dir;
  write_data(dir.file("data.h5"));
  const auto train = [&](const std::string& precision) {
    return run("train --train.precision=" + precision + " --train.threads=1 --data.path=" + dir.file("data.h5") +
                   " --run.dir=" + dir.file("run-" + precision) + kTinyRun,
               dir);
  };
  const Outcome bf16 = train("bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.out << bf16.err;
  EXPECT_NE(bf16.out.find("bf16 compute"), std::string::npos) << bf16.out;
  EXPECT_TRUE(fs::exists(dir.file("run-bf16")));
  const Outcome fp32 = train("fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.out << fp32.err;
  EXPECT_EQ(fp32.out.find("bf16 compute"), std::string::npos) << fp32.out;
}

}  // namespace
}  // namespace pipelane::cuda_test
