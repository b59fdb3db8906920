// Llama-family models in and out (trainer/hf/hf_llama*.h): export -> import -> export is
// byte-identical (LlamaForCausalLM, and Qwen2ForCausalLM for bias = qkv with a tied head), a
// sharded model.safetensors.index.json loads the same weights, a shape that disagrees with
// config.json is one line naming the tensor, configs pipelane cannot run are refused by key,
// [run] init_from fine-tunes from a Hugging Face directory, and eval/generate run the model
// through the KV-cache decoder (RoPE and GQA at absolute positions) to the trainer's loss.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/token_store.h"
#include "tests/datasets/test_files.h"
#include "trainer/cli/eval_command.h"
#include "trainer/cli/generate_command.h"
#include "trainer/cli/import_command.h"
#include "trainer/cli/train_command.h"
#include "trainer/hf/hf_llama_io.h"
#include "trainer/hf/model_source.h"
#include "trainer/hf/safetensors.h"

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

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }

std::vector<double> losses(const std::string& run_dir) {
  std::vector<double> out;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (const json row = json::parse(line); row.contains("loss")) out.push_back(row["loss"].get<double>());
  return out;
}

// A tiny Llama (4 heads on 2 kv heads, untied head) and a Qwen2-like one (q/k/v biases, tied).
std::string config(const std::string& data, const std::string& run_dir, bool qwen2) {
  return std::string("[model]\narch = llama\nlayers = 2\nd_model = 32\nheads = 4\nkv_heads = 2\nseq_len = 16\n"
                     "vocab_size = 256\nffn_hidden = 48\nrope_theta = 10000\n") +
         (qwen2 ? "bias = qkv\ntie_embeddings = true\nnorm_eps = 1e-6\n" : "") +
         "[train]\nmicro_batch = 4\nglobal_batch = 8\nsteps = 6\nwarmup_steps = 2\nlr = 0.01\n"
         "eval_every = 6\neval_batches = 2\nthreads = 2\npeak_gflops = 100\n"
         "[data]\npath = " + data + "\n[run]\ndir = " + run_dir + "\nlog_every = 3\ncheckpoint_every = 6\n";
}

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

class LlamaIo : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    write_corpus(dir_->file("data.h5"));
    testing::internal::CaptureStdout();
    for (bool qwen2 : {false, true}) {
      const std::string name = qwen2 ? "qwen2" : "llama";
      write_file(dir_->file(name + ".ini"), config(dir_->file("data.h5"), dir_->file(name), qwen2));
      ASSERT_EQ(call(train_command, {"train", "--config", dir_->file(name + ".ini")}), 0);
    }
    testing::internal::GetCapturedStdout();
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string checkpoint(const std::string& name) { return dir_->file(name) + "/checkpoints/step_00000006"; }
  static TempDir* dir_;
};
TempDir* LlamaIo::dir_ = nullptr;

TEST_F(LlamaIo, ExportImportExportIsByteIdentical) {
  for (const std::string name : {"llama", "qwen2"}) {
    TempDir tmp;
    const json c1 = export_hf_llama(checkpoint(name), tmp.file("hf1"));
    EXPECT_EQ(c1["model_type"], name == "llama" ? "llama" : "qwen2");
    EXPECT_EQ(c1["num_key_value_heads"], 2);
    EXPECT_EQ(c1["tie_word_embeddings"], name == "qwen2");
    SafetensorsReader r(tmp.file("hf1") + "/model.safetensors");
    EXPECT_EQ(r.has("lm_head.weight"), name == "llama");
    EXPECT_EQ(r.has("model.layers.1.self_attn.k_proj.bias"), name == "qwen2");
    EXPECT_FALSE(r.has("model.layers.1.self_attn.o_proj.bias"));
    EXPECT_EQ(r.tensors().at("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<std::int64_t>{16, 32}));
    EXPECT_EQ(r.tensors().at("model.embed_tokens.weight").shape, (std::vector<std::int64_t>{256, 32}));
    testing::internal::CaptureStdout();
    ASSERT_EQ(call(import_command, {"import", "--input", tmp.file("hf1"), "--output", tmp.file("ck")}), 0);
    EXPECT_NE(testing::internal::GetCapturedStdout().find("Llama-family 2 layers"), std::string::npos);
    json c2 = export_hf_llama(tmp.file("ck"), tmp.file("hf2"));
    EXPECT_EQ(slurp(tmp.file("hf1") + "/model.safetensors"), slurp(tmp.file("hf2") + "/model.safetensors")) << name;
    json a = c1;
    a.erase("pipelane");
    c2.erase("pipelane");
    EXPECT_EQ(a, c2) << name;
  }
}

// The single file split into two shards with an index, as save_pretrained writes large models.
void shard(const std::string& hf) {
  SafetensorsReader r(hf + "/model.safetensors");
  std::vector<SafetensorOut> a, b;
  json map = json::object();
  for (const auto& [name, info] : r.tensors()) {
    const bool first = name.find("layers.1.") == std::string::npos && name != "lm_head.weight";
    (first ? a : b).push_back({name, info.shape, r.read_f32(name)});
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(hf + "/model-00001-of-00002.safetensors", a, {});
  write_safetensors(hf + "/model-00002-of-00002.safetensors", b, {});
  write_file(hf + "/model.safetensors.index.json", json{{"metadata", json::object()}, {"weight_map", map}}.dump());
  fs::remove(hf + "/model.safetensors");
}

TEST_F(LlamaIo, ShardedIndexLoadsTheSameWeights) {
  TempDir tmp;
  export_hf_llama(checkpoint("llama"), tmp.file("hf"));
  const LoadedModel single = load_model(tmp.file("hf"));
  shard(tmp.file("hf"));
  const LoadedModel sharded = load_model(tmp.file("hf"));
  EXPECT_EQ(single.params, sharded.params);
  const LoadedModel trained = load_model(checkpoint("llama"));
  EXPECT_EQ(single.params, trained.params);
}

TEST_F(LlamaIo, RefusalsAreOneLineNamingTheTensorOrKey) {
  TempDir tmp;
  const std::string hf = tmp.file("hf");
  export_hf_llama(checkpoint("llama"), hf);
  const json good = read_json(hf + "/config.json");
  const auto import_error = [&](const json& c) {
    write_file(hf + "/config.json", c.dump());
    try {
      load_model(hf);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      return what;
    }
    return std::string("loaded");
  };
  const auto has = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  json bad = good;
  bad["intermediate_size"] = 64;
  EXPECT_TRUE(has(import_error(bad), "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [48, 32] but "
                                     "config.json says [64, 32]"));
  bad = good;
  bad["num_key_value_heads"] = 4;
  EXPECT_TRUE(has(import_error(bad), "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 32]"));
  bad = good;
  bad["model_type"] = "mistral";
  bad["sliding_window"] = 8;
  EXPECT_TRUE(has(import_error(bad), "sliding_window = 8"));
  bad = good;
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
  EXPECT_TRUE(has(import_error(bad), "rope_type = \"yarn\""));
  bad = good;
  bad["hidden_act"] = "gelu";
  EXPECT_TRUE(has(import_error(bad), "hidden_act = gelu"));
  bad = good;
  bad["attention_bias"] = true;
  EXPECT_TRUE(has(import_error(bad), "attention_bias = true with mlp_bias = false"));
  bad = good;
  bad["model_type"] = "mistral";  // Mistral's layout with the window off is the same model
  bad["sliding_window"] = nullptr;
  EXPECT_EQ(import_error(bad), "loaded");
}

TEST_F(LlamaIo, InitFromAHuggingFaceDirectoryFineTunes) {
  TempDir tmp;
  export_hf_llama(checkpoint("llama"), tmp.file("hf"));
  std::vector<std::vector<double>> runs;
  testing::internal::CaptureStdout();
  for (const std::string& from : {tmp.file("hf"), checkpoint("llama"), std::string()}) {
    const std::string run = tmp.file("run" + std::to_string(runs.size()));
    ASSERT_EQ(call(train_command, {"train", "--config", dir_->file("llama.ini"), "--run.dir=" + run,
                                   "--train.steps=2", "--train.warmup_steps=0", "--train.eval_every=0",
                                   "--run.checkpoint_every=0", "--run.init_from=" + from}),
              0);
    runs.push_back(losses(run));
  }
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(runs[0], runs[1]);            // the same weights, bit for bit
  EXPECT_LT(runs[0][0] + 1.0, runs[2][0]);  // far better than a fresh start
}

TEST_F(LlamaIo, EvalMatchesTheTrainerAndGenerateRepeats) {
  EvalRequest req;
  req.model = checkpoint("llama");
  req.data = dir_->file("data.h5");
  req.seq_len = 16;
  req.batch = 4;
  req.max_tokens = 8 * 16;
  req.threads = 2;
  const EvalResult r = evaluate(req);
  const double trainer = read_json(dir_->file("llama") + "/summary.json")["final_val_loss"].get<double>();
  EXPECT_NEAR(r.loss, trainer, 1e-6 * trainer);
  const auto generate = [&](const std::string& seed) {
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const int rc = call(generate_command, {"generate", "--model", checkpoint("llama"), "--prompt", "pipeline ",
                                           "--tokens", "12", "--seed", seed, "--json", "--threads", "1"});
    testing::internal::GetCapturedStderr();
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(rc, 0);
    return json::parse(out);
  };
  const json a = generate("5"), b = generate("5");
  EXPECT_EQ(a["tokens"].size(), 12u);
  EXPECT_EQ(a["text"], b["text"]);
}

}  // namespace
}  // namespace pipelane
