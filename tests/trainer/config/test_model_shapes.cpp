// The Llama-family keys of [model]: the shape configs of real models have exactly their published
// parameter counts, the arch sets the defaults of keys that can still be set one by one, and each
// refused combination is refused at parse time with one line naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainer/config/train_options.h"

namespace pipelane {
namespace {

TrainOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

std::string config_path(const std::string& name) { return std::string(PIPELANE_SOURCE_DIR) + "/configs/" + name; }

std::uint64_t params_of(const std::string& config) {
  return *gpt_config_from(parse({"--config", config_path(config)}).model).total_params();
}

TEST(ModelShapes, ShapeConfigsHaveThePublishedParameterCounts) {
  // meta-llama/Llama-3.2-1B: 1.24B (tied); meta-llama/Meta-Llama-3-8B: 8.03B; Qwen/Qwen2.5-0.5B: 0.49B.
  EXPECT_EQ(params_of("llama3.2-1b.ini"), 1235814400ull);
  EXPECT_EQ(params_of("llama3-8b.ini"), 8030261248ull);
  EXPECT_EQ(params_of("qwen2.5-0.5b.ini"), 494032768ull);
  const GptConfig l8 = gpt_config_from(parse({"--config", config_path("llama3-8b.ini")}).model);
  EXPECT_EQ(l8.mlp_hidden(), 14336);  // Meta's rule with ffn_dim_multiplier 1.3, multiple_of 1024
  EXPECT_FALSE(l8.tie_embeddings);
  const GptConfig tiny = gpt_config_from(parse({"--config", config_path("llama-tiny.ini")}).model);
  EXPECT_EQ(tiny.mlp_hidden(), 384);
  EXPECT_EQ(tiny.n_kv_heads(), 2);
}

// MFU's FLOP count for Llama 3 8B, by hand from its shapes: a layer's matrices are q and o
// (4096 x 4096 each), k and v on 8 of the 32 heads (4096 x 1024 each) and SwiGLU's gate, up and
// down (3 x 4096 x 14336): 218,103,808 (GPT-2's 12 d^2 rule would give 201,326,592, and MHA with
// SwiGLU 243,269,632). Training FLOPs per token at T = 8192: 6 x (non-embedding parameters
// 6,979,588,096 + the untied head's 4096 x 128256) + 12 x 32 x 4096 x 8192 = 57,914,449,920.
TEST(ModelShapes, Llama3_8bFlopsCountSwiglusThreeMatricesAndGqasNarrowKeysAndValues) {
  const GptConfig l8 = gpt_config_from(parse({"--config", config_path("llama3-8b.ini")}).model);
  EXPECT_EQ(l8.layer_matrix_params(), 218103808.0);
  EXPECT_EQ(l8.non_embedding_params(), 6979588096);
  EXPECT_EQ(l8.train_flops_per_token(8192), 57914449920.0);
}

TEST(ModelShapes, ArchSetsDefaultsThatKeysOverrideOneByOne) {
  const ModelOptions gpt2 = parse({}).model;
  EXPECT_EQ(gpt2.norm, "layernorm");
  EXPECT_EQ(gpt2.bias, "all");
  EXPECT_TRUE(gpt_config_from(gpt2).is_plain_gpt2());
  const ModelOptions llama = parse({"--model.arch=llama"}).model;
  EXPECT_EQ(llama.norm, "rmsnorm");
  EXPECT_EQ(llama.position, "rope");
  EXPECT_EQ(llama.mlp, "swiglu");
  EXPECT_EQ(llama.bias, "none");
  EXPECT_FALSE(llama.tie_embeddings);
  EXPECT_EQ(llama.rope_theta, 500000);
  const ModelOptions mixed = parse({"--model.arch=llama", "--model.norm=layernorm", "--model.mlp=gelu",
                                    "--model.tie_embeddings=true", "--model.position=learned"}).model;
  EXPECT_EQ(mixed.norm, "layernorm");
  EXPECT_EQ(mixed.mlp, "gelu");
  EXPECT_EQ(gpt_config_from(mixed).mlp_hidden(), 4 * 128);
  const ModelOptions rope_gpt2 = parse({"--model.norm=rmsnorm", "--model.position=rope", "--model.bias=none"}).model;
  EXPECT_EQ(rope_gpt2.arch, "gpt2");
  EXPECT_FALSE(gpt_config_from(rope_gpt2).is_plain_gpt2());
  // The resolved config written to a run directory parses back to the same options.
  const TrainOptions t = parse({"--config", config_path("llama3-8b.ini")});
  EXPECT_NE(t.to_ini().find("arch = llama"), std::string::npos);
}

std::string refusal(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  return "accepted";
}

TEST(ModelShapes, RefusedCombinationsAreOneLineNamingTheKey) {
  const auto has = [](const std::string& text, const char* part) { return text.find(part) != std::string::npos; };
  EXPECT_TRUE(has(refusal({"--model.arch=llama", "--model.kv_heads=3"}), "kv_heads (3) must divide heads (4)"));
  EXPECT_TRUE(has(refusal({"--model.kv_heads=2"}), "needs arch = llama"));
  EXPECT_TRUE(has(refusal({"--model.mlp=swiglu"}), "mlp = swiglu needs arch = llama"));
  EXPECT_TRUE(has(refusal({"--model.heads=8", "--model.d_model=40", "--model.position=rope"}), "must be even"));
  EXPECT_TRUE(has(refusal({"--model.norm_eps=1e-6"}), "norm_eps"));
  EXPECT_TRUE(has(refusal({"--model.arch=llama", "--model.rope_factor=4"}), "needs rope_scaling = llama3"));
  EXPECT_TRUE(has(refusal({"--model.arch=llama", "--model.rope_scaling=llama3", "--model.rope_low_freq_factor=5"}),
                  "rope_low_freq_factor"));
  EXPECT_TRUE(has(refusal({"--model.ffn_multiple_of=64"}), "ffn_multiple_of"));
  EXPECT_TRUE(has(refusal({"--model.arch=llama", "--model.kv_heads=1", "--parallel.tp=2"}),
                  "does not divide [model] kv_heads = 1"));
  EXPECT_TRUE(has(refusal({"--model.arch=llama", "--model.ffn_hidden=100", "--parallel.tp=8", "--model.heads=8"}),
                  "does not divide the MLP width 100"));
}

}  // namespace
}  // namespace pipelane
