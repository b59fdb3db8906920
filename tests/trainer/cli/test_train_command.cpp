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
#include "trainer/cli/train_command.h"

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

// A corpus of one repeated text, so a model trained on it predicts it with a low loss and other
// text with a high one.
void write_repeated(const std::string& path, const std::string& text, const std::string& tokenizer = "byte") {
  TokenSplit train, valid;
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
  write_token_store(path, {tokenizer, 256, {"test"}}, train, valid);
}

// A small byte corpus with structure a model can pick up.
void write_corpus(const std::string& path) { write_repeated(path, "the quick brown fox jumps over the lazy dog. "); }

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

double final_val_loss(const std::string& run_dir) {
  const auto summary = nlohmann::json::parse(std::ifstream(fs::path(run_dir) / "summary.json"));
  return summary["final_val_loss"].get<double>();
}

TEST(TrainCommand, BlendTrainsOnItsFilesAndEvaluatesOnPath) {
  TempDir dir;
  write_repeated(dir.file("a.h5"), "abcdefgh ");
  write_repeated(dir.file("z.h5"), "zyxwvuts ");
  write_file(dir.file("c.ini"), tiny_config(dir.file("a.h5"), dir.file("run")));
  const auto train_on = [&](const std::string& blend, const std::string& run) {
    return run_train({"--config", dir.file("c.ini"), "--train.steps=12", "--train.eval_every=12",
                      "--train.lr=0.01", "--data.blend=" + blend, "--run.dir=" + dir.file(run)});
  };
  ASSERT_EQ(train_on(dir.file("a.h5") + ":1", "on_a"), 0);
  ASSERT_EQ(train_on(dir.file("z.h5") + ":1", "on_z"), 0);
  ASSERT_EQ(train_on(dir.file("a.h5") + ":0.5," + dir.file("z.h5") + ":0.5", "on_both"), 0);
  // Validation is always a.h5's: training on z alone must do clearly worse on it than training on
  // a, and the even blend must land in between.
  const double on_a = final_val_loss(dir.file("on_a")), on_z = final_val_loss(dir.file("on_z")),
               on_both = final_val_loss(dir.file("on_both"));
  EXPECT_LT(on_a + 1.0, on_z);
  EXPECT_LT(on_a, on_both);
  EXPECT_LT(on_both, on_z);
  // The blend is recorded in the run's resolved config.
  std::ifstream config(fs::path(dir.file("on_both")) / "config.ini");
  const std::string text((std::istreambuf_iterator<char>(config)), {});
  EXPECT_NE(text.find("blend = " + dir.file("a.h5") + ":0.5,"), std::string::npos) << text;
}

TEST(TrainCommand, BadBlendsFailNamingTheEntryBeforeAnythingIsWritten) {
  TempDir dir;
  write_corpus(dir.file("data.h5"));
  write_repeated(dir.file("gpt2.h5"), "abc ", "gpt2");
  write_file(dir.file("c.ini"), tiny_config(dir.file("data.h5"), dir.file("run")));
  const auto fails_with = [&](const std::string& blend, const std::string& expected, int code) {
    testing::internal::CaptureStderr();
    const int rc = run_train({"--config", dir.file("c.ini"), "--data.blend=" + blend});
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, code) << err;
    EXPECT_NE(err.find(expected), std::string::npos) << "expected '" << expected << "' in: " << err;
    EXPECT_FALSE(fs::exists(dir.file("run")));
  };
  fails_with(dir.file("data.h5") + ":0", "blend entry", 2);
  fails_with(dir.file("data.h5") + "=1", "expected PATH:WEIGHT", 2);
  fails_with(dir.file("data.h5") + ":1," + dir.file("absent.h5") + ":1", dir.file("absent.h5"), 1);
  fails_with(dir.file("gpt2.h5") + ":1", dir.file("gpt2.h5") + ": tokenized with 'gpt2'", 2);
}

}  // namespace
}  // namespace pipelane
