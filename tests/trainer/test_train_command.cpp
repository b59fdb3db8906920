// `pipelane train` end to end, in process: bad input stops with a non-zero code and leaves no run
// directory that looks complete; a good run writes every file and is bit-for-bit repeatable.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/token_store.h"
#include "tests/datasets/test_files.h"
#include "trainer/train_command.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;
using test_support::write_file;

int run_train(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return train_command(static_cast<int>(argv.size()), argv.data());
}

// A small byte corpus with structure a model can pick up.
void write_corpus(const std::string& path) {
  TokenSplit train, valid;
  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  for (int doc = 0; doc < 40; ++doc) {
    train.doc_offsets.push_back(train.tokens.size());
    for (int r = 0; r < 3; ++r)
      for (unsigned char ch : text) train.tokens.push_back(ch);
  }
  train.doc_offsets.push_back(train.tokens.size());
  valid.doc_offsets.push_back(0);
  for (int r = 0; r < 6; ++r)
    for (unsigned char ch : text) valid.tokens.push_back(ch);
  valid.doc_offsets.push_back(valid.tokens.size());
  write_token_store(path, {"byte", 256, {"test"}}, train, valid);
}

std::string tiny_config(const std::string& data, const std::string& run_dir) {
  return "[model]\nlayers = 2\nd_model = 32\nheads = 2\nseq_len = 16\nvocab_size = 256\n"
         "[train]\nmicro_batch = 4\nglobal_batch = 8\nsteps = 6\nwarmup_steps = 2\n"
         "eval_every = 3\neval_batches = 2\nthreads = 2\npeak_gflops = 100\n"
         "[data]\npath = " + data + "\n[run]\ndir = " + run_dir + "\nlog_every = 1\n";
}

std::vector<double> losses_of(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.contains("loss")) out.push_back(row["loss"].get<double>());
  }
  return out;
}

TEST(TrainCommand, GoodRunWritesEveryFileAndRepeatsBitForBit) {
  TempDir dir;
  write_corpus(dir.file("data.h5"));
  std::vector<double> losses[2];
  for (int run = 0; run < 2; ++run) {
    const std::string run_dir = dir.file("run" + std::to_string(run));
    write_file(dir.file("c.ini"), tiny_config(dir.file("data.h5"), run_dir));
    ASSERT_EQ(run_train({"--config", dir.file("c.ini")}), 0);
    ASSERT_TRUE(fs::exists(fs::path(run_dir) / "config.ini"));
    ASSERT_TRUE(fs::exists(fs::path(run_dir) / "summary.json"));
    losses[run] = losses_of(fs::path(run_dir) / "metrics.jsonl");
    const auto summary = nlohmann::json::parse(std::ifstream(fs::path(run_dir) / "summary.json"));
    EXPECT_EQ(summary["steps"], 6);
    EXPECT_TRUE(summary["final_val_loss"].is_number());
    EXPECT_GT(summary["unigram_val_loss"].get<double>(), 0.0);
  }
  ASSERT_EQ(losses[0].size(), 6u);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_LT(losses[0].back(), losses[0].front());
}

TEST(TrainCommand, CommandLineOverridesTheFile) {
  TempDir dir;
  write_corpus(dir.file("data.h5"));
  write_file(dir.file("c.ini"), tiny_config(dir.file("data.h5"), dir.file("run")));
  ASSERT_EQ(run_train({"--config", dir.file("c.ini"), "--train.steps=2", "--train.eval_every=0"}), 0);
  EXPECT_EQ(losses_of(fs::path(dir.file("run")) / "metrics.jsonl").size(), 2u);
}

TEST(TrainCommand, TypoInAKeyFailsBeforeAnythingIsWritten) {
  TempDir dir;
  write_corpus(dir.file("data.h5"));
  std::string cfg = tiny_config(dir.file("data.h5"), dir.file("run"));
  cfg.replace(cfg.find("warmup_steps"), 12, "warmup_stpes");
  write_file(dir.file("c.ini"), cfg);
  EXPECT_NE(run_train({"--config", dir.file("c.ini")}), 0);
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(TrainCommand, MissingDataFileFailsBeforeAnythingIsWritten) {
  TempDir dir;
  write_file(dir.file("c.ini"), tiny_config(dir.file("absent.h5"), dir.file("run")));
  EXPECT_NE(run_train({"--config", dir.file("c.ini")}), 0);
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(TrainCommand, CorruptDataFileFailsBeforeAnythingIsWritten) {
  TempDir dir;
  write_corpus(dir.file("data.h5"));
  std::string bytes;
  {
    std::ifstream in(dir.file("data.h5"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  write_file(dir.file("cut.h5"), bytes.substr(0, bytes.size() / 2));
  write_file(dir.file("c.ini"), tiny_config(dir.file("cut.h5"), dir.file("run")));
  EXPECT_NE(run_train({"--config", dir.file("c.ini")}), 0);
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(TrainCommand, ARerunRejectedByChecksLeavesThePreviousRunWhole) {
  TempDir dir;
  write_corpus(dir.file("data.h5"));
  write_file(dir.file("c.ini"), tiny_config(dir.file("data.h5"), dir.file("run")));
  ASSERT_EQ(run_train({"--config", dir.file("c.ini"), "--train.steps=2"}), 0);
  ASSERT_TRUE(fs::exists(fs::path(dir.file("run")) / "summary.json"));
  // Every check runs before the directory is touched, so the earlier run stays as it was.
  EXPECT_NE(run_train({"--config", dir.file("c.ini"), "--model.seq_len=100000"}), 0);
  EXPECT_TRUE(fs::exists(fs::path(dir.file("run")) / "summary.json"));
}

TEST(TrainCommand, DataWithALargerVocabularyThanTheModelIsRejected) {
  TempDir dir;
  write_corpus(dir.file("data.h5"));
  write_file(dir.file("c.ini"), tiny_config(dir.file("data.h5"), dir.file("run")));
  EXPECT_NE(run_train({"--config", dir.file("c.ini"), "--model.vocab_size=100"}), 0);
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

}  // namespace
}  // namespace pipelane
