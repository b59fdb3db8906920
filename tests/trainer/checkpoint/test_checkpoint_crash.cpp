// Crash safety: SIGKILL the trainer at 20 seeded random moments (during steps, during checkpoint
// writing, during start-up); after every kill the newest complete checkpoint must load, and
// `resume = auto` must carry the run to a final state bit-identical to an uninterrupted run.
// ctest label `slow` (about a minute on 2 cores).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "tests/trainer/checkpoint/test_checkpoint_support.h"
#include "trainer/checkpoint/checkpoint.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using namespace test_support;

TEST(CheckpointCrash, TwentySigkillsThenResumeEqualsTheUninterruptedRun) {
  TempDir dir;
  write_test_corpus(dir.file("data.h5"));
  constexpr int kSteps = 120;
  write_file(dir.file("c.ini"), tiny_checkpoint_config(dir.file("data.h5"), kSteps, 1));
  auto train = [&](const std::string& run, const std::string& env) {
    return run_job(0, "--config " + dir.file("c.ini") + " --run.dir=" + dir.file(run) + " --run.keep_last=2",
                   dir.file(run + ".log"), env);
  };
  const JobResult straight = train("straight", "");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const int full_ms = static_cast<int>(straight.seconds * 1000);

  std::mt19937 rng(20240607);
  // Each life lasts a random share of up to 1/20 of an uninterrupted run, so 20 lives end
  // before the training does: kills land in start-up, in steps and in checkpoint writing alike.
  std::uniform_int_distribution<int> delay(0, std::max(50, full_ms / 20));
  int kills = 0, previous_newest = 0, restarts = 0;
  const std::string root = dir.file("crashy/checkpoints");
  for (int life = 0; kills < 20 && life < 60; ++life) {
    const int ms = delay(rng);
    const JobResult r = train("crashy", "PIPELANE_FAULT_KILL=0:" + std::to_string(ms));
    if (r.exit_code == 0) {
      // The life outran its kill to the end of the training: the machine ran faster than while
      // the straight run was timed (load from other tests). Its result must still be the
      // straight run's; then the crashes start over from nothing.
      EXPECT_EQ(loss_texts(dir.file("straight")), loss_texts(dir.file("crashy"))) << "life " << life;
      fs::remove_all(dir.file("crashy"));
      previous_newest = 0;
      ++restarts;
      continue;
    }
    ++kills;
    ASSERT_EQ(r.exit_code, 137) << "life " << life << ": " << r.output;  // 128 + SIGKILL
    // The newest complete checkpoint is never older than before and always loads in full.
    if (auto newest = newest_complete_checkpoint(root)) {
      CheckpointReader reader(*newest);
      EXPECT_GE(reader.step(), previous_newest) << "life " << life;
      previous_newest = reader.step();
      for (const auto& n : reader.tensor_names()) reader.full_tensor("params", n);
      EXPECT_EQ(reader.progress().step, reader.step());
    }
  }
  EXPECT_EQ(kills, 20);
  const JobResult last = train("crashy", "");
  ASSERT_EQ(last.exit_code, 0) << last.output;
  EXPECT_EQ(loss_texts(dir.file("straight")), loss_texts(dir.file("crashy")));
  expect_same_tensors(dir.file("straight/checkpoints/") + checkpoint_dir_name(kSteps),
                      root + "/" + checkpoint_dir_name(kSteps));
  std::printf("  %d kills, %d restarts; newest checkpoint before the last life: step %d of %d\n", kills, restarts,
              previous_newest, kSteps);
}

}  // namespace
}  // namespace pipelane
