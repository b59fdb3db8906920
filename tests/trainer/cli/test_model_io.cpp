// Models in and out of training, in process: import (export -> import -> export is byte-identical,
// bad directories are one clear error), [run] init_from, eval (the trainer's validation loss
// again; text files; bad input), generate, samples during training, and the numbers a run reports
// about itself (steps actually run, traced steps, MFU named by its peak).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/token_store.h"
#include "tests/datasets/test_files.h"
#include "trainer/cli/eval_command.h"
#include "trainer/cli/export_command.h"
#include "trainer/cli/generate_command.h"
#include "trainer/cli/import_command.h"
#include "trainer/hf/safetensors.h"
#include "trainer/cli/train_command.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_support::TempDir;
using test_support::write_file;

int call(int (*command)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return command(static_cast<int>(argv.size()), argv.data());
}

std::string config(const std::string& data, const std::string& run_dir) {
  return "[model]\nlayers = 2\nd_model = 32\nheads = 2\nseq_len = 16\nvocab_size = 256\n"
         "[train]\nmicro_batch = 4\nglobal_batch = 8\nsteps = 6\nwarmup_steps = 2\nlr = 0.01\n"
         "eval_every = 3\neval_batches = 2\nthreads = 2\npeak_gflops = 100\n"
         "[data]\npath = " + data + "\n[run]\ndir = " + run_dir + "\nlog_every = 3\n";
}

// One sentence repeated: a model learns it in a few steps, so loaded weights are easy to tell
// from fresh ones.
void write_corpus(const std::string& path) {
  const std::string text = "pipeline bubbles are idle time; lanes fill them with useful work. ";
  TokenSplit train, valid;
  train.doc_offsets = {0};
  valid.doc_offsets = {0};
  for (int r = 0; r < 60; ++r) train.tokens.insert(train.tokens.end(), text.begin(), text.end());
  for (int r = 0; r < 4; ++r) valid.tokens.insert(valid.tokens.end(), text.begin(), text.end());
  train.doc_offsets.push_back(train.tokens.size());
  valid.doc_offsets.push_back(valid.tokens.size());
  TokenStoreMeta meta;
  meta.tokenizer = "byte";
  meta.vocab_size = 256;
  write_token_store(path, meta, train, valid);
}

json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }

std::vector<json> read_lines(const fs::path& p) {
  std::vector<json> rows;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

std::vector<double> losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const json& row : read_lines(fs::path(run_dir) / "metrics.jsonl"))
    if (row.contains("loss")) out.push_back(row["loss"].get<double>());
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One trained run with a checkpoint at step 6, shared by the tests of this file.
class ModelIo : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    write_corpus(dir_->file("data.h5"));
    write_file(dir_->file("c.ini"), config(dir_->file("data.h5"), dir_->file("run")));
    testing::internal::CaptureStdout();
    const int rc = call(train_command, {"train", "--config", dir_->file("c.ini"), "--run.checkpoint_every=6"});
    testing::internal::GetCapturedStdout();
    ASSERT_EQ(rc, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string checkpoint() { return dir_->file("run") + "/checkpoints/step_00000006"; }
  static TempDir* dir_;
};
TempDir* ModelIo::dir_ = nullptr;

TEST_F(ModelIo, ExportImportExportIsByteIdentical) {
  TempDir tmp;
  export_hf_gpt2(checkpoint(), tmp.file("hf1"));
  ASSERT_EQ(call(import_command, {"import", "--format", "safetensors", "--input", tmp.file("hf1"), "--output",
                                  tmp.file("ck")}),
            0);
  export_hf_gpt2(tmp.file("ck"), tmp.file("hf2"));
  EXPECT_EQ(slurp(tmp.file("hf1") + "/model.safetensors"), slurp(tmp.file("hf2") + "/model.safetensors"));
  json a = read_json(tmp.file("hf1") + "/config.json"), b = read_json(tmp.file("hf2") + "/config.json");
  EXPECT_EQ(b["pipelane"]["checkpoint"], tmp.file("ck"));  // provenance: where each export came from
  a.erase("pipelane");
  b.erase("pipelane");
  EXPECT_EQ(a, b);
  // Importing over an existing checkpoint is refused; resuming from a weights-only one says what to do.
  EXPECT_EQ(call(import_command, {"import", "--input", tmp.file("hf1"), "--output", tmp.file("ck")}), 1);
  write_file(tmp.file("c.ini"), config(dir_->file("data.h5"), tmp.file("run")));
  testing::internal::CaptureStderr();
  EXPECT_EQ(call(train_command, {"train", "--config", tmp.file("c.ini"), "--run.resume=" + tmp.file("ck")}), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("init_from"), std::string::npos);
}

TEST_F(ModelIo, ImportRefusesWhatIsNotPipelanesGpt2) {
  TempDir tmp;
  const std::string hf = tmp.file("hf");
  export_hf_gpt2(checkpoint(), hf);
  const auto import_error = [&](const std::string& out) {
    testing::internal::CaptureStderr();
    const int rc = call(import_command, {"import", "--input", hf, "--output", tmp.file(out)});
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 1) << err;
    return err;
  };
  const json good = read_json(hf + "/config.json");
  json bad = good;
  bad["activation_function"] = "gelu";
  write_file(hf + "/config.json", bad.dump());
  EXPECT_NE(import_error("a").find("activation_function = gelu"), std::string::npos);
  bad = good;
  bad["n_layer"] = 3;
  write_file(hf + "/config.json", bad.dump());
  EXPECT_NE(import_error("b").find("no tensor 'transformer.h.2.ln_1.weight'"), std::string::npos);
  bad = good;
  bad["n_embd"] = 64;
  write_file(hf + "/config.json", bad.dump());
  EXPECT_NE(import_error("c").find("has shape [256, 32] but config.json says [256, 64]"), std::string::npos);
  write_file(hf + "/config.json", "{not json");
  EXPECT_NE(import_error("d").find("config.json: not valid JSON"), std::string::npos);
  // An untied head, and a tensor GPT-2 does not have.
  write_file(hf + "/config.json", good.dump());
  SafetensorsReader r(hf + "/model.safetensors");
  std::vector<SafetensorOut> tensors;
  for (const auto& [name, info] : r.tensors()) tensors.push_back({name, info.shape, r.read_f32(name)});
  std::vector<float> head = r.read_f32("transformer.wte.weight");
  head[0] += 1;
  tensors.push_back({"lm_head.weight", r.tensors().at("transformer.wte.weight").shape, head});
  write_safetensors(hf + "/model.safetensors", tensors, {});
  EXPECT_NE(import_error("e").find("lm_head.weight differs"), std::string::npos);
  tensors.back() = {"extra.weight", {1}, {0.f}};
  write_safetensors(hf + "/model.safetensors", tensors, {});
  EXPECT_NE(import_error("f").find("unexpected tensor 'extra.weight'"), std::string::npos);
  // A truncated weights file.
  const std::string bytes = slurp(hf + "/model.safetensors");
  write_file(hf + "/model.safetensors", bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(import_error("g").find("lie outside"), std::string::npos);
  EXPECT_EQ(call(import_command, {"import", "--input", hf}), 2);  // no --output
  EXPECT_EQ(call(import_command, {"import", "--input", hf, "--output", tmp.file("h"), "--format", "gguf"}), 2);
}

TEST_F(ModelIo, InitFromStartsTrainingFromTheImportedWeights) {
  TempDir tmp;
  export_hf_gpt2(checkpoint(), tmp.file("hf"));
  ASSERT_EQ(call(import_command, {"import", "--input", tmp.file("hf"), "--output", tmp.file("ck")}), 0);
  write_file(tmp.file("c.ini"), config(dir_->file("data.h5"), tmp.file("run")));
  std::vector<std::vector<double>> runs;
  testing::internal::CaptureStdout();
  for (const std::string& from : {tmp.file("ck"), tmp.file("hf"), checkpoint(), std::string()}) {
    const std::string run = tmp.file("run" + std::to_string(runs.size()));
    ASSERT_EQ(call(train_command, {"train", "--config", tmp.file("c.ini"), "--run.dir=" + run, "--train.steps=2",
                                   "--train.warmup_steps=0", "--train.eval_every=0", "--run.init_from=" + from}),
              0);
    runs.push_back(losses(run));
  }
  testing::internal::GetCapturedStdout();
  // The imported checkpoint, the Hugging Face directory and the original checkpoint hold the same
  // weights: the same losses, bit for bit. A fresh start is far worse on its first step.
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
  EXPECT_LT(runs[0][0] + 1.0, runs[3][0]);
  const std::vector<double> trained = losses(dir_->file("run"));
  EXPECT_LT(runs[0][0], trained.front() - 1.0);
  // A model of another shape is one line naming the key.
  testing::internal::CaptureStderr();
  EXPECT_EQ(call(train_command, {"train", "--config", tmp.file("c.ini"), "--run.dir=" + tmp.file("x"),
                                 "--model.d_model=64", "--run.init_from=" + tmp.file("ck")}),
            1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("d_model = 32 where [model] d_model = 64"), std::string::npos);
}

TEST_F(ModelIo, EvalRepeatsTheTrainersValidationLoss) {
  // The trainer evaluated eval_batches x micro_batch = 8 windows of seq_len 16 after step 6.
  EvalRequest req;
  req.model = checkpoint();
  req.data = dir_->file("data.h5");
  req.seq_len = 16;
  req.batch = 4;
  req.max_tokens = 8 * 16;
  req.threads = 2;
  const EvalResult r = evaluate(req);
  const double trainer = read_json(dir_->file("run") + "/summary.json")["final_val_loss"].get<double>();
  EXPECT_EQ(r.tokens, 8 * 16);
  EXPECT_NEAR(r.loss, trainer, 1e-6 * trainer);  // the same windows and kernels; sums in another order
  EXPECT_NEAR(r.perplexity, std::exp(r.loss), 1e-9 * r.perplexity);
  EXPECT_GT(r.unigram_loss, 0);
  // Text tokenised on the fly, and the JSON of the command.
  const std::string text = "pipeline bubbles are idle time; lanes fill them with useful work. "
                           "pipeline bubbles are idle time; lanes fill them with useful work. ";
  write_file(dir_->file("t.txt"), text);
  testing::internal::CaptureStdout();
  ASSERT_EQ(call(eval_command, {"eval", "--model", checkpoint(), "--data", dir_->file("t.txt"), "--json"}), 0);
  const json j = json::parse(testing::internal::GetCapturedStdout());
  EXPECT_EQ(j["seq_len"], 16);
  EXPECT_EQ(j["tokens"], 16 * ((text.size() - 1) / 16));  // windows of 16 + 1 bytes, stepping by 16
  EXPECT_NE(j["unigram_fit"].get<std::string>().find("in-sample"), std::string::npos);
  // Bad input: one line each.
  const auto eval_error = [&](std::vector<std::string> args) {
    testing::internal::CaptureStderr();
    args.insert(args.begin(), "eval");
    const int rc = call(eval_command, args);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(rc, 0) << err;
    return err;
  };
  EXPECT_NE(eval_error({"--model", checkpoint(), "--data", dir_->file("absent.txt")}).find("no such file"),
            std::string::npos);
  EXPECT_NE(eval_error({"--model", checkpoint(), "--data", dir_->file("data.h5"), "--seq-len", "17"})
                .find("exceeds the model's context of 16"),
            std::string::npos);
  EXPECT_NE(eval_error({"--model", dir_->file("nowhere"), "--data", dir_->file("data.h5")}).find("no such directory"),
            std::string::npos);
  EXPECT_NE(eval_error({"--model", checkpoint(), "--data", dir_->file("data.h5"), "--split", "test"})
                .find("expected valid or train"),
            std::string::npos);
  EXPECT_NE(eval_error({"--data", dir_->file("data.h5")}).find("--model and --data are required"), std::string::npos);
}

TEST_F(ModelIo, GenerateRepeatsForASeed) {
  const auto generate = [&](const std::string& seed) {
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const int rc = call(generate_command, {"generate", "--model", checkpoint(), "--prompt", "pipeline ", "--tokens",
                                           "40", "--seed", seed, "--json", "--threads", "1"});
    testing::internal::GetCapturedStderr();
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(rc, 0);
    return json::parse(out);
  };
  const json a = generate("5"), b = generate("5"), c = generate("6");
  EXPECT_EQ(a["tokens"].size(), 40u);
  EXPECT_EQ(a["text"], b["text"]);
  EXPECT_NE(a["tokens"], c["tokens"]);
  EXPECT_EQ(a["prompt_tokens"], 9);
}

TEST_F(ModelIo, SamplesDoNotChangeTrainingAndRepeat) {
  TempDir tmp;
  write_file(tmp.file("c.ini"), config(dir_->file("data.h5"), tmp.file("x")));
  testing::internal::CaptureStdout();
  for (const char* run : {"a", "b"})
    ASSERT_EQ(call(train_command, {"train", "--config", tmp.file("c.ini"), std::string("--run.dir=") + tmp.file(run),
                                   "--train.sample_every=3", "--train.sample_tokens=12",
                                   "--train.sample_prompt=pipeline"}),
              0);
  const std::string console = testing::internal::GetCapturedStdout();
  EXPECT_NE(console.find("step 3 sample: pipeline"), std::string::npos) << console;
  // Bit-identical losses to the run without samples.
  EXPECT_EQ(losses(tmp.file("a")), losses(dir_->file("run")));
  const std::vector<json> samples = read_lines(fs::path(tmp.file("a")) / "samples.jsonl");
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0]["step"], 3);
  EXPECT_EQ(samples[1]["step"], 6);
  EXPECT_EQ(samples[1]["tokens"].size(), 12u);
  EXPECT_EQ(samples, read_lines(fs::path(tmp.file("b")) / "samples.jsonl"));
}

// Issue #25: a run keeps its model without being asked (a checkpoint after the last step), which
// eval, generate and export find from the run directory; and samples.jsonl follows metrics.jsonl's
// rule on a rerun: a resumed run keeps the rows up to its checkpoint, a fresh start replaces them.
TEST_F(ModelIo, EveryRunKeepsItsModelAndItsFilesFollowOneRule) {
  TempDir tmp;
  write_file(tmp.file("c.ini"), config(dir_->file("data.h5"), tmp.file("run")));
  const auto train = [&](std::vector<std::string> args, const std::string& sample_every = "2") {
    args.insert(args.begin(), {"train", "--config", tmp.file("c.ini"), "--train.sample_every=" + sample_every,
                               "--train.sample_tokens=4"});
    testing::internal::CaptureStdout();
    const int rc = call(train_command, args);
    testing::internal::GetCapturedStdout();
    return rc;
  };
  ASSERT_EQ(train({}), 0);
  const fs::path root = fs::path(tmp.file("run")) / "checkpoints";
  std::vector<std::string> saved;
  for (const auto& e : fs::directory_iterator(root)) saved.push_back(e.path().filename().string());
  EXPECT_EQ(saved, std::vector<std::string>{"step_00000006"});  // the default: after the last step only
  EXPECT_EQ(losses(tmp.file("run")), losses(dir_->file("run")));  // saving more changes no loss
  EvalRequest req;
  req.data = dir_->file("data.h5");
  req.max_tokens = 64;
  req.threads = 1;
  req.model = tmp.file("run");
  const EvalResult from_run_dir = evaluate(req);
  req.model = (root / "step_00000006").string();
  EXPECT_EQ(from_run_dir.loss, evaluate(req).loss);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  EXPECT_EQ(call(generate_command, {"generate", "--model", tmp.file("run"), "--tokens", "4", "--threads", "1"}), 0);
  EXPECT_EQ(call(export_command, {"export", "--checkpoint", tmp.file("run"), "--output", tmp.file("hf")}), 0);
  testing::internal::GetCapturedStderr();
  testing::internal::GetCapturedStdout();
  EXPECT_TRUE(fs::exists(tmp.file("hf") + "/model.safetensors"));

  // Stopped after step 4 with a checkpoint there; a row of lost work (step 5) is in samples.jsonl.
  setenv("PIPELANE_STOP_AFTER_STEP", "4", 1);
  ASSERT_EQ(train({"--run.dir=" + tmp.file("cut"), "--run.checkpoint_every=2"}), 0);
  unsetenv("PIPELANE_STOP_AFTER_STEP");
  const fs::path samples = fs::path(tmp.file("cut")) / "samples.jsonl";
  std::ofstream(samples, std::ios::app) << json{{"step", 5}, {"text", "lost"}}.dump() << "\n";
  ASSERT_EQ(train({"--run.dir=" + tmp.file("cut"), "--run.checkpoint_every=2"}), 0);
  std::vector<int> steps;
  for (const json& row : read_lines(samples)) {
    steps.push_back(row["step"].get<int>());
    EXPECT_NE(row["text"], "lost");
  }
  EXPECT_EQ(steps, (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(read_lines(samples), read_lines(fs::path(tmp.file("run")) / "samples.jsonl"));  // as if never stopped
  // A fresh start over it (archived): this run's rows only, the old ones in the archive.
  ASSERT_EQ(train({"--run.dir=" + tmp.file("cut"), "--run.resume=none", "--run.overwrite=archive"}, "3"), 0);
  steps.clear();
  for (const json& row : read_lines(samples)) steps.push_back(row["step"].get<int>());
  EXPECT_EQ(steps, (std::vector<int>{3, 6}));
  int archived = 0;
  for (const auto& e : fs::directory_iterator(fs::path(tmp.file("cut")) / "archive"))
    archived += fs::exists(e.path() / "samples.jsonl");
  EXPECT_EQ(archived, 1);
}

TEST_F(ModelIo, SummaryCountsTheStepsRunAndTheTracedSteps) {
  TempDir tmp;
  write_file(tmp.file("c.ini"), config(dir_->file("data.h5"), tmp.file("run")));
  const auto train = [&](std::vector<std::string> args, std::string* console) {
    args.insert(args.begin(), {"train", "--config", tmp.file("c.ini"), "--run.checkpoint_every=2"});
    testing::internal::CaptureStdout();
    const int rc = call(train_command, args);
    *console = testing::internal::GetCapturedStdout();
    return rc;
  };
  std::string first, second;
  setenv("PIPELANE_STOP_AFTER_STEP", "4", 1);
  ASSERT_EQ(train({"--run.trace_steps=2-3"}, &first), 0);
  unsetenv("PIPELANE_STOP_AFTER_STEP");
  json s = read_json(tmp.file("run") + "/summary.json");
  EXPECT_EQ(s["steps"], 4);
  EXPECT_EQ(s["last_step"], 4);
  EXPECT_EQ(s["tokens"].get<double>(), 4.0 * 8 * 16);
  EXPECT_EQ(s["traced_steps"], json({2, 3}));
  EXPECT_EQ(s["peak_source"], "[train] peak_gflops");
  int traced = 0;
  const json trace = read_json(tmp.file("run") + "/trace.json");
  for (const json& e : trace["traceEvents"])
    if (e.value("cat", "") == "step") {
      EXPECT_EQ(e["args"]["step"], 2 + traced++);
    }
  EXPECT_EQ(traced, 2);
  // Resumed: the 2 steps this process ran, not 6.
  ASSERT_EQ(train({}, &second), 0);
  s = read_json(tmp.file("run") + "/summary.json");
  EXPECT_EQ(s["steps"], 2);
  EXPECT_EQ(s["first_step"], 5);
  EXPECT_EQ(s["tokens"].get<double>(), 2.0 * 8 * 16);
  EXPECT_EQ(s["traced_steps"], json({5, 6}));  // the default: the first 20 steps this run executes
  EXPECT_NE(first.find("trained      4 steps (steps 1-4 of 6, stopped early), 512 tokens"), std::string::npos)
      << first;
  EXPECT_NE(second.find("trained      2 steps (steps 5-6 of 6, resumed from step 4), 256 tokens"), std::string::npos)
      << second;
  EXPECT_NE(first.find("memory: "), std::string::npos) << first;
}

}  // namespace
}  // namespace pipelane

namespace pipelane {
namespace {

TEST(TrainCommandGrid, AWrongWorldSizeSaysWhatWouldWork) {
  test_support::TempDir tmp;
  write_file(tmp.file("c.ini"), config(tmp.file("absent.h5"), tmp.file("run")));
  const auto error_of = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"train", "--config", tmp.file("c.ini")});
    testing::internal::CaptureStderr();
    EXPECT_EQ(call(train_command, args), 2);
    return testing::internal::GetCapturedStderr();
  };
  EXPECT_NE(error_of({"--parallel.pp=2", "--parallel.tp=2"}).find("use -np 4 for tp 2 x pp 2 (or -np 8, 12, ..."),
            std::string::npos);
  EXPECT_NE(error_of({"--parallel.pp=2", "--parallel.dp=3"}).find("use -np 6 for dp 3 x pp 2"), std::string::npos);
}

}  // namespace
}  // namespace pipelane
