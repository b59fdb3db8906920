#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "trainer/config/ini_scan.h"
#include "trainer/config/train_options.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;

// Each test gets its own directory so config files never collide between tests or runs.
class TrainOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = fs::temp_directory_path() / ("pipelane_options_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_config(const std::string& text, const std::string& file_name = "tiny.ini") {
    const fs::path path = dir_ / file_name;
    std::ofstream(path) << text;
    return path.string();
  }

  fs::path dir_;
};

TrainOptions parse(std::initializer_list<std::string> arguments) {
  std::vector<std::string> storage{"train"};
  storage.insert(storage.end(), arguments.begin(), arguments.end());
  std::vector<const char*> argv;
  for (const std::string& argument : storage) argv.push_back(argument.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

// The ConfigError message of parsing, or "" when it parsed.
std::string parse_error(std::initializer_list<std::string> arguments) {
  try {
    parse(arguments);
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "error must be one line: " << message;
    return message;
  }
  return "";
}

TEST_F(TrainOptionsTest, DefaultsWhenNoConfigFile) {
  const TrainOptions options = parse({});
  EXPECT_EQ(options.model, ModelOptions{});
  EXPECT_EQ(options.train, TrainLoopOptions{});
  EXPECT_EQ(options.data, DataOptions{});
  EXPECT_EQ(options.run, RunOptions{});
  EXPECT_EQ(options.config_path, "");
  EXPECT_FALSE(options.help_requested);
  // Spot-check the documented defaults themselves, not just self-consistency.
  EXPECT_EQ(options.model.d_model, 128);
  EXPECT_EQ(options.train.lr, 1e-3);
  EXPECT_EQ(options.train.seed, 1337u);
  EXPECT_EQ(options.data.tokenizer, "byte");
  EXPECT_EQ(options.run.dir, "runs/latest");
}

TEST_F(TrainOptionsTest, ReadsValuesFromFile) {
  const std::string path = write_config(
      "# tiny model\n"
      "; semicolon comments too\n"
      "\n"
      "[model]\n"
      "layers=2\n"
      "  d_model   =   64   \n"
      "heads = 2  # inline comment\n"
      "[train]\n"
      "lr = 3e-4\r\n"
      "seed = 18446744073709551615\n"
      "grad_clip = 0\n"
      "[data]\n"
      "path = data/a#b.h5\n"
      "tokenizer = gpt2\n"
      "[run]\n"
      "dir = runs/tiny\n"
      "log_every = 1\n");
  const TrainOptions options = parse({"--config", path});
  EXPECT_EQ(options.config_path, path);
  EXPECT_EQ(options.model.layers, 2);
  EXPECT_EQ(options.model.d_model, 64);
  EXPECT_EQ(options.model.heads, 2);
  EXPECT_EQ(options.model.seq_len, ModelOptions{}.seq_len);
  EXPECT_EQ(options.train.lr, 3e-4);
  EXPECT_EQ(options.train.seed, 18446744073709551615ull);
  EXPECT_EQ(options.train.grad_clip, 0.0);
  EXPECT_EQ(options.data.path, "data/a#b.h5");
  EXPECT_EQ(options.data.tokenizer, "gpt2");
  EXPECT_EQ(options.run.dir, "runs/tiny");
  EXPECT_EQ(options.run.log_every, 1);
}

TEST_F(TrainOptionsTest, CommandLineOverridesFileInBothForms) {
  const std::string path = write_config("[train]\nlr = 3e-4\nsteps = 100\nmin_lr = 1e-5\n[run]\nlog_every = 5\n");
  const TrainOptions options = parse({"--train.lr=6e-4", "--config=" + path, "--run.log_every", "7"});
  EXPECT_EQ(options.train.lr, 6e-4);
  EXPECT_EQ(options.run.log_every, 7);
  EXPECT_EQ(options.train.steps, 100);  // from the file, not overridden
  EXPECT_EQ(options.train.min_lr, 1e-5);
}

TEST_F(TrainOptionsTest, AnEmptyValueAfterTheEqualsSignClearsAKey) {
  const std::string path = write_config("[lanes]\nenabled = pagerank\n[lane.pagerank]\ngenerate = rmat\n");
  const TrainOptions cleared = parse({"--config", path, "--lanes.enabled=", "--lanes.plugins="});
  EXPECT_EQ(cleared.lanes.enabled, "");
  EXPECT_EQ(cleared.lanes.plugins, "");
  // An empty value of a number is still an error, with the key named.
  EXPECT_EQ(parse_error({"--train.lr="}), "command line: --train.lr=: expected a number");
}

TEST_F(TrainOptionsTest, CommandLineWorksWithoutFile) {
  const TrainOptions options = parse({"--model.layers", "6", "--data.tokenizer=gpt2"});
  EXPECT_EQ(options.model.layers, 6);
  EXPECT_EQ(options.data.tokenizer, "gpt2");
}

TEST_F(TrainOptionsTest, HelpFlagIsReported) {
  const TrainOptions options = parse({"--help"});
  EXPECT_TRUE(options.help_requested);
}

TEST_F(TrainOptionsTest, UnknownKeyInFileSuggestsClosest) {
  const std::string path = write_config("[model]\nlayers = 2\n\n[train]\n# lr next\n\nlrr = 3e-4\n");
  EXPECT_EQ(parse_error({"--config", path}), path + ":7: unknown key 'lrr' in [train] (did you mean 'lr'?)");
}

TEST_F(TrainOptionsTest, UnknownKeyFarFromAnyKnownHasNoSuggestion) {
  const std::string path = write_config("[train]\nbanana = 3\n");
  EXPECT_EQ(parse_error({"--config", path}), path + ":2: unknown key 'banana' in [train]");
}

TEST_F(TrainOptionsTest, KeyOfAnotherSectionIsUnknown) {
  const std::string path = write_config("[model]\nlr = 3e-4\n");
  EXPECT_EQ(parse_error({"--config", path}).rfind(path + ":2: unknown key 'lr' in [model]", 0), 0u);
}

TEST_F(TrainOptionsTest, UnknownSection) {
  const std::string path = write_config("# config\n\n[modle]\nlayers = 2\n");
  const std::string error = parse_error({"--config", path});
  EXPECT_EQ(error.rfind(path + ":3: unknown section [modle]", 0), 0u) << error;
  EXPECT_NE(error.find("did you mean [model]"), std::string::npos) << error;
}

TEST_F(TrainOptionsTest, EmptyUnknownSectionIsStillAnError) {
  const std::string path = write_config("[model]\nlayers = 2\n[parallelism]\n");
  EXPECT_EQ(parse_error({"--config", path}), path + ":3: unknown section [parallelism]");
}

TEST_F(TrainOptionsTest, BadNumberInFile) {
  const std::string path = write_config("[model]\nlayers = 2\n\n\n\n\n\n[train]\nlr = abc\n");
  EXPECT_EQ(parse_error({"--config", path}), path + ":9: [train] lr = 'abc': expected a number");
}

TEST_F(TrainOptionsTest, IntegersMustParseFully) {
  for (const std::string value : {"12abc", "1.5", "", "1e3", " "}) {
    const std::string path = write_config("[model]\nlayers = " + value + "\n");
    const std::string error = parse_error({"--config", path});
    EXPECT_EQ(error.rfind(path + ":2: [model] layers = '", 0), 0u) << error;
    EXPECT_NE(error.find(": expected an integer"), std::string::npos) << value << " -> " << error;
  }
}

TEST_F(TrainOptionsTest, NumbersRejectGarbageAndNonFinite) {
  for (const std::string value : {"3e-4x", "nan", "inf", "1,5"}) {
    const std::string path = write_config("[train]\nweight_decay = " + value + "\n");
    EXPECT_EQ(parse_error({"--config", path}),
              path + ":2: [train] weight_decay = '" + value + "': expected a number");
  }
}

TEST_F(TrainOptionsTest, SeedRejectsNegative) {
  EXPECT_EQ(parse_error({"--train.seed=-1"}), "command line: --train.seed=-1: expected a non-negative integer");
}

TEST_F(TrainOptionsTest, DuplicateKeyInFileNamesBothLines) {
  const std::string path = write_config("[train]\nlr = 1e-3\nsteps = 10\n[model]\nlayers = 2\n[train]\nlr = 2e-3\n");
  EXPECT_EQ(parse_error({"--config", path}), path + ":7: [train] lr given twice (first at line 2)");
}

TEST_F(TrainOptionsTest, SyntaxErrorsCarryTheLine) {
  EXPECT_EQ(parse_error({"--config", write_config("[model]\nlayers 2\n")}),
            (dir_ / "tiny.ini").string() + ":2: expected 'key = value' or '[section]', got 'layers 2'");
  EXPECT_EQ(parse_error({"--config", write_config("# header\nlayers = 2\n")}),
            (dir_ / "tiny.ini").string() + ":2: key 'layers' appears before any [section]");
  EXPECT_EQ(parse_error({"--config", write_config("[model\n")}),
            (dir_ / "tiny.ini").string() + ":1: malformed section header '[model'");
}

TEST_F(TrainOptionsTest, CommandLineUnknownKey) {
  const std::string error = parse_error({"--train.lrr=3"});
  EXPECT_EQ(error.rfind("command line: --train.lrr: unknown key", 0), 0u) << error;
  EXPECT_NE(error.find("did you mean --train.lr?"), std::string::npos) << error;
}

TEST_F(TrainOptionsTest, CommandLineDoesNotGuessPrefixes) {
  EXPECT_EQ(parse_error({"--train.l=3"}).rfind("command line: --train.l: unknown key", 0), 0u);
}

TEST_F(TrainOptionsTest, CommandLineBadValueInBothForms) {
  EXPECT_EQ(parse_error({"--train.lr=abc"}), "command line: --train.lr=abc: expected a number");
  EXPECT_EQ(parse_error({"--train.lr", "abc"}), "command line: --train.lr=abc: expected a number");
  EXPECT_EQ(parse_error({"--model.layers=0"}), "command line: --model.layers=0: expected an integer >= 1");
}

TEST_F(TrainOptionsTest, CommandLineOtherMistakes) {
  EXPECT_EQ(parse_error({"--train.lr"}).rfind("command line: ", 0), 0u);
  EXPECT_EQ(parse_error({"stray"}), "command line: unexpected argument 'stray'");
  EXPECT_EQ(parse_error({"--train.lr=1e-3", "--train.lr=2e-3"}), "command line: --train.lr given twice");
}

TEST_F(TrainOptionsTest, MissingConfigFile) {
  EXPECT_EQ(parse_error({"--config", "configs/x.ini"}), "configs/x.ini: no such config file");
}

TEST_F(TrainOptionsTest, CommandLineOverrideFixesAnInvalidFileValue) {
  const std::string path = write_config("[train]\nlr = abc\n");
  EXPECT_EQ(parse({"--config", path, "--train.lr=2e-3"}).train.lr, 2e-3);
}

// Invalid values and combinations: the file text, the line of the offending key, and the
// message after "file:line: ".
struct InvalidCase {
  std::string name;
  std::string config;
  int line;
  std::string message;
  // Keeps gtest from dumping the struct's bytes into test names and failures.
  friend void PrintTo(const InvalidCase& invalid, std::ostream* out) { *out << invalid.name; }
};

class InvalidConfigTest : public TrainOptionsTest, public ::testing::WithParamInterface<InvalidCase> {};

TEST_P(InvalidConfigTest, NamesFileLineAndKey) {
  const InvalidCase& invalid = GetParam();
  const std::string path = write_config(invalid.config);
  EXPECT_EQ(parse_error({"--config", path}), path + ":" + std::to_string(invalid.line) + ": " + invalid.message);
}

INSTANTIATE_TEST_SUITE_P(
    Checks, InvalidConfigTest,
    ::testing::Values(
        InvalidCase{"HeadsDivideDModel", "[model]\nd_model = 128\n\nheads = 5\n", 4,
                    "[model] heads = 5 does not divide d_model = 128"},
        // heads is the default here, so the error points at the d_model that broke it.
        InvalidCase{"DModelNotDivisibleByDefaultHeads", "[model]\nlayers = 2\nd_model = 130\n", 3,
                    "[model] heads = 4 does not divide d_model = 130"},
        InvalidCase{"GlobalBatchMultipleOfMicro", "[train]\nmicro_batch = 4\nglobal_batch = 10\n", 3,
                    "[train] global_batch = 10 is not a multiple of micro_batch = 4"},
        InvalidCase{"MinLrAboveLr", "[train]\nlr = 1e-3\nmin_lr = 0.01\n", 3,
                    "[train] min_lr = 0.01 is greater than lr = 0.001"},
        InvalidCase{"WarmupAboveSteps", "[train]\nsteps = 10\n", 2, "[train] warmup_steps = 20 is greater than steps = 10"},
        InvalidCase{"SeqLenPositive", "[model]\nseq_len = 0\n", 2, "[model] seq_len = '0': expected an integer >= 1"},
        InvalidCase{"VocabAtLeastTwo", "[model]\nvocab_size = 1\n", 2,
                    "[model] vocab_size = '1': expected an integer >= 2"},
        InvalidCase{"LayersPositive", "[model]\nlayers = -3\n", 2, "[model] layers = '-3': expected an integer >= 1"},
        InvalidCase{"EvalEveryNotNegative", "[train]\neval_every = -1\n", 2,
                    "[train] eval_every = '-1': expected an integer >= 0"},
        InvalidCase{"LogEveryPositive", "[run]\nlog_every = 0\n", 2, "[run] log_every = '0': expected an integer >= 1"},
        InvalidCase{"GradClipNotNegative", "[train]\ngrad_clip = -0.5\n", 2,
                    "[train] grad_clip = '-0.5': expected a number >= 0"},
        InvalidCase{"LrPositive", "[train]\nlr = 0\n", 2, "[train] lr = '0': expected a number > 0"},
        InvalidCase{"Beta1BelowOne", "[train]\nbeta1 = 1\n", 2, "[train] beta1 = '1': expected a number in [0, 1)"},
        InvalidCase{"TokenizerKnown", "[data]\ntokenizer = bpe\n", 2,
                    "[data] tokenizer = 'bpe': expected byte, gpt2, cl100k, o200k, llama3, hf:PATH/tokenizer.json or "
                    "spm:PATH.model"},
        InvalidCase{"BlendNeedsWeights", "[data]\npath = a.h5\nblend = a.h5:0.7,b.h5\n", 3,
                    "[data] blend: blend entry 'b.h5': expected PATH:WEIGHT with a weight > 0 (e.g. a.h5:0.7,b.h5:0.3)"},
        InvalidCase{"BlendWeightsPositive", "[data]\nblend = a.h5:-1\n", 2,
                    "[data] blend: blend entry 'a.h5:-1': expected PATH:WEIGHT with a weight > 0 (e.g. a.h5:0.7,b.h5:0.3)"},
        InvalidCase{"Bf16StorageNeedsBf16Compute", "[train]\nstorage = bf16\n", 2,
                    "[train] storage = bf16 keeps activations in bf16 for bf16 GEMMs: it needs precision = bf16 "
                    "(precision is fp32)"},
        InvalidCase{"Bf16GemmWeightsNeedBf16Compute", "[train]\ngemm_weights = bf16\n", 2,
                    "[train] gemm_weights = bf16 is the copy of the weights that bf16 GEMMs read: it needs "
                    "precision = bf16 (precision is fp32)"},
        InvalidCase{"SequenceParallelNeedsTp", "[parallel]\nsequence_parallel = true\n", 2,
                    "[parallel] sequence_parallel splits the sequence over the tensor-parallel ranks: it needs tp > 1 "
                    "(tp is 1)"},
        InvalidCase{"SequenceParallelNeedsTpDividingSeqLen",
                    "[model]\nseq_len = 127\n[parallel]\ntp = 2\nsequence_parallel = true\n", 5,
                    "[parallel] sequence_parallel needs tp = 2 to divide [model] seq_len = 127"}),
    [](const ::testing::TestParamInfo<InvalidCase>& info) { return info.param.name; });

TEST_F(TrainOptionsTest, CombinationFromCommandLineSaysCommandLine) {
  EXPECT_EQ(parse_error({"--model.heads=5"}), "command line: [model] heads = 5 does not divide d_model = 128");
  const std::string path = write_config("[train]\nsteps = 100\n");
  EXPECT_EQ(parse_error({"--config", path, "--train.warmup_steps=101"}),
            "command line: [train] warmup_steps = 101 is greater than steps = 100");
}

// The GPU keys (runtime/cuda/README.md): what cannot run is refused at parse time, in one line.
TEST_F(TrainOptionsTest, GpuKeysRefuseWhatCannotRun) {
  EXPECT_EQ(parse_error({"--model.attention=flash"}),
            "command line: --model.attention=flash: expected one of cublas cudnn");
  EXPECT_EQ(parse_error({"--model.attention=cudnn"}),
            "command line: [model] attention = cudnn runs cuDNN's fused attention on a GPU: it needs [runtime] "
            "backend = cuda (backend is cpu)");
  EXPECT_EQ(parse({"--runtime.backend=cuda", "--model.attention=cudnn"}).model.attention, "cudnn");
  EXPECT_EQ(parse_error({"--train.precision=fp16"}),
            "command line: --train.precision=fp16: expected one of fp32 bf16");
  EXPECT_EQ(parse_error({"--lanes.sm_partition=8"}),
            "command line: [lanes] sm_partition = 8 partitions a GPU's SMs: it needs [runtime] backend = cuda "
            "(backend is cpu)");
  EXPECT_EQ(parse({"--runtime.backend=cuda:1", "--lanes.sm_partition=8"}).lanes.sm_partition, 8);
  EXPECT_EQ(parse({"--train.precision=bf16"}).train.precision, "bf16");  // refused later, by the backend
}

TEST_F(TrainOptionsTest, ToIniRoundTrips) {
  const TrainOptions original = parse({"--model.layers=3", "--model.d_model=96", "--model.heads=3",
                                       "--train.lr=0.00030000000000000003", "--train.eps=1e-300",
                                       "--train.seed=18446744073709551615", "--train.peak_gflops=123.456",
                                       "--data.path=some dir/data.h5", "--data.tokenizer=gpt2",
                                       "--data.blend=a b.h5:0.25,c.h5:3", "--run.dir=runs/x"});
  const std::string path = write_config(original.to_ini(), "resolved.ini");
  const TrainOptions reread = parse({"--config", path});
  EXPECT_EQ(reread.model, original.model);
  EXPECT_EQ(reread.train, original.train);
  EXPECT_EQ(reread.data, original.data);
  EXPECT_EQ(reread.run, original.run);
  EXPECT_EQ(reread.to_ini(), original.to_ini());
  EXPECT_EQ(reread.train.lr, 0.00030000000000000003);  // not rounded to 3e-4
  EXPECT_NE(reread.train.lr, 3e-4);
}

// Every key a user can set, with its default as text. Written out here rather than taken
// from the implementation so that a key missing from the option table fails the test.
const std::vector<std::tuple<std::string, std::string, std::string>> kEveryKeyWithDefault = {
    {"runtime", "backend", "cpu"},
    {"model", "layers", "4"},          {"model", "d_model", "128"},       {"model", "heads", "4"},
    {"model", "seq_len", "128"},       {"model", "vocab_size", "256"},    {"model", "attention", "cublas"},
    {"model", "arch", "gpt2"},         {"model", "norm", "layernorm"},    {"model", "norm_eps", "1e-05"},
    {"model", "position", "learned"},  {"model", "rope_theta", "10000"},  {"model", "rope_scaling", "none"},
    {"model", "rope_factor", "8"},     {"model", "rope_low_freq_factor", "1"},
    {"model", "rope_high_freq_factor", "4"}, {"model", "rope_original_context", "8192"},
    {"model", "mlp", "gelu"},          {"model", "ffn_hidden", "0"},      {"model", "ffn_multiple_of", "256"},
    {"model", "ffn_dim_multiplier", "0"}, {"model", "kv_heads", "0"},     {"model", "tie_embeddings", "true"},
    {"model", "bias", "all"},
    {"train", "micro_batch", "8"},
    {"train", "global_batch", "8"},    {"train", "steps", "200"},         {"train", "lr", "0.001"},
    {"train", "min_lr", "1e-04"},      {"train", "warmup_steps", "20"},   {"train", "weight_decay", "0.1"},
    {"train", "grad_clip", "1"},       {"train", "beta1", "0.9"},         {"train", "beta2", "0.95"},
    {"train", "eps", "1e-08"},         {"train", "seed", "1337"},         {"train", "eval_every", "50"},
    {"train", "eval_batches", "8"},    {"train", "threads", "0"},         {"train", "peak_gflops", "0"},
    {"train", "max_bad_steps", "5"},   {"train", "loss_spike_zscore", "0"},
    {"train", "sample_every", "0"},    {"train", "sample_tokens", "64"},  {"train", "sample_prompt", ""},
    {"train", "precision", "fp32"},
    {"train", "storage", "fp32"},      {"train", "gemm_weights", "fp32"}, {"train", "recompute", "none"},    {"train", "recompute_method", "uniform"}, {"train", "recompute_layers", "1"},
    {"train", "distributed_optimizer", "false"},
    {"data", "path", "data/jargon.h5"}, {"data", "tokenizer", "byte"},
    {"data", "sample_mode", "cross-documents"}, {"data", "blend", ""},
    {"parallel", "tp", "1"},           {"parallel", "pp", "1"},           {"parallel", "dp", "0"},
    {"parallel", "schedule", "1f1b"},  {"parallel", "virtual_stages", "1"},
    {"parallel", "layers_per_stage", ""}, {"parallel", "sequence_parallel", "false"},
    {"run", "dir", "runs/latest"},     {"run", "log_every", "10"},
    {"run", "checkpoint_every", "-1"},  {"run", "keep_last", "3"},       {"run", "resume", "auto"},
    {"run", "timeout_s", "600"},
    {"run", "overwrite", "refuse"},
    {"run", "init_from", ""},          {"run", "trace_steps", ""},
    {"lanes", "enabled", ""},          {"lanes", "memory_mb", "256"},     {"lanes", "stage_memory_mb", "1024"},
    {"lanes", "margin", "0.9"},        {"lanes", "deterministic", "false"}, {"lanes", "profile_iterations", "2"},
    {"lanes", "control_every", "32"},
    {"lanes", "stages", "all"},        {"lanes", "plugins", ""},      {"lanes", "isolation", "auto"},
    {"lanes", "output_mb", "1024"},    {"lanes", "baseline", ""},     {"lanes", "dedicated", ""},
    {"lanes", "plan", ""},             {"lanes", "state_mb", "64"},       {"lanes", "network", ""},
    {"lanes", "max_processes", "256"},
    {"lanes", "sm_partition", "0"},
    {"lanes", "train_price_per_hour", "0"}, {"lanes", "dedicated_price_per_hour", "0"},
    {"wan", "cluster", ""},            {"wan", "sharing", "off"},     {"wan", "connections", "0"},
    {"wan", "placement", "stages"},    {"wan", "force", "false"},
};

TEST_F(TrainOptionsTest, ToIniHasEveryKeyInItsSection) {
  std::istringstream ini(TrainOptions{}.to_ini());
  const IniScan scan = scan_ini(ini);
  ASSERT_EQ(scan.entries.size(), kEveryKeyWithDefault.size());
  for (const auto& [section, key, default_text] : kEveryKeyWithDefault) {
    bool found = false;
    for (const IniEntry& entry : scan.entries) {
      if (entry.section == section && entry.key == key) {
        found = true;
        EXPECT_EQ(entry.value, default_text) << section << "." << key;
      }
    }
    EXPECT_TRUE(found) << section << "." << key;
  }
}

TEST_F(TrainOptionsTest, HelpListsEveryKeyWithDefaultGroupedBySection) {
  const std::string help = train_options_help();
  std::size_t previous_section_at = 0;
  std::string previous_section;
  for (const auto& [section, key, default_text] : kEveryKeyWithDefault) {
    const std::size_t section_at = help.find("[" + section + "]");
    ASSERT_NE(section_at, std::string::npos) << section;
    if (section != previous_section) {
      EXPECT_GT(section_at, previous_section_at) << "sections out of order at " << section;
      previous_section_at = section_at;
      previous_section = section;
    }
    const std::string option = "--" + section + "." + key + " ";
    const std::size_t key_at = help.find(option);
    ASSERT_NE(key_at, std::string::npos) << option;
    EXPECT_GT(key_at, section_at) << option << " listed before its section header";
    const std::string line = help.substr(key_at, help.find('\n', key_at) - key_at);
    const std::string shown = default_text.empty() ? "\"\"" : default_text;  // empty shows as ""
    EXPECT_NE(line.find("(=" + shown + ")"), std::string::npos) << line;
    // A description follows the default on the same line.
    EXPECT_GT(line.size(), line.find(')') + 3) << line;
  }
  EXPECT_NE(help.find("--config"), std::string::npos);
}

// ---------------------------------------------------------------------------------------
// [lanes] and [lane.NAME]

TEST_F(TrainOptionsTest, LanesSectionAndLaneSectionsAreRead) {
  const std::string path = write_config(
      "[lanes]\nenabled = pagerank, imageproc\nmemory_mb = 128\nstage_memory_mb = 512\nmargin = 0.8\n"
      "deterministic = true\nprofile_iterations = 3\nstages = 0,1\nplugins = a.so, /x/b.so\n"
      "[parallel]\npp = 2\n[lane.pagerank]\ndamping = 0.85\ngraph = data/g.txt\n[lane.imageproc]\n");
  const TrainOptions options = parse({"--config", path});
  const LanesOptions& lanes = options.lanes;
  EXPECT_EQ(lanes.enabled_lanes(), (std::vector<std::string>{"pagerank", "imageproc"}));
  EXPECT_EQ(lanes.memory_mb, 128);
  EXPECT_EQ(lanes.stage_memory_mb, 512);
  EXPECT_EQ(lanes.margin, 0.8);
  EXPECT_TRUE(lanes.deterministic);
  EXPECT_EQ(lanes.profile_iterations, 3);
  EXPECT_TRUE(lanes.runs_on_stage(1));
  EXPECT_FALSE(lanes.runs_on_stage(2));
  EXPECT_EQ(lanes.plugin_paths(), (std::vector<std::string>{"a.so", "/x/b.so"}));
  const std::map<std::string, std::map<std::string, std::string>> sections = {
      {"pagerank", {{"damping", "0.85"}, {"graph", "data/g.txt"}}}, {"imageproc", {}}};
  EXPECT_EQ(lanes.lane_sections, sections);
  EXPECT_EQ(lanes.lane_sections_source, path);
}

TEST_F(TrainOptionsTest, LanesAreOffByDefault) {
  const LanesOptions lanes = parse({}).lanes;
  EXPECT_TRUE(lanes.enabled_lanes().empty());
  EXPECT_TRUE(lanes.lane_sections.empty());
  EXPECT_TRUE(lanes.runs_on_stage(7));
  EXPECT_EQ(lanes.lane_sections_source, "command line");
}

TEST_F(TrainOptionsTest, LaneKeysOnTheCommandLineOverrideTheFile) {
  const std::string path = write_config("[lanes]\nenabled = pagerank,word_count\n[lane.pagerank]\ndamping = 0.85\n");
  const TrainOptions options = parse({"--config", path, "--lane.pagerank.damping=0.9", "--lane.word_count.input",
                                      "data/t.txt", "--lanes.margin", "0.5", "--lanes.deterministic=on"});
  EXPECT_EQ(options.lanes.lane_sections.at("pagerank").at("damping"), "0.9");
  EXPECT_EQ(options.lanes.lane_sections.at("word_count").at("input"), "data/t.txt");
  EXPECT_EQ(options.lanes.margin, 0.5);
  EXPECT_TRUE(options.lanes.deterministic);
}

// A config keeps the sections of all its lanes; --lanes.enabled= picks some (issue #25: it used to
// refuse the config's other sections). Those are ignored with a note naming where they are.
TEST_F(TrainOptionsTest, LaneSectionOfALaneNotEnabledIsIgnoredWithANote) {
  const std::string path = write_config(
      "[lanes]\nenabled = pagerank,imageproc\n[lane.pagerank]\nscale = 10\n\n[lane.imageproc]\ngenerate = 5\n");
  const TrainOptions both = parse({"--config", path});
  EXPECT_TRUE(both.notes.empty());
  const TrainOptions pi = parse({"--config", path, "--lanes.enabled=pi"});
  EXPECT_EQ(pi.lanes.enabled_lanes(), std::vector<std::string>{"pi"});
  EXPECT_EQ(pi.notes, (std::vector<std::string>{
                          path + ":6: [lane.imageproc] ignored: 'imageproc' is not in [lanes] enabled (enabled = pi)",
                          path + ":3: [lane.pagerank] ignored: 'pagerank' is not in [lanes] enabled (enabled = pi)"}));
  const TrainOptions off = parse({"--config", path, "--lanes.enabled="});
  EXPECT_TRUE(off.lanes.enabled_lanes().empty());
  ASSERT_EQ(off.notes.size(), 2u);
  EXPECT_NE(off.notes[0].find("(lanes are off)"), std::string::npos) << off.notes[0];
  // The sections stay in the options (lane-bench reads a lane's section whatever is enabled).
  EXPECT_EQ(pi.lanes.lane_sections.at("pagerank").at("scale"), "10");
  EXPECT_EQ(parse({"--lane.x.k=1"}).notes,
            std::vector<std::string>{"command line: [lane.x] ignored: 'x' is not in [lanes] enabled (lanes are off)"});
  const std::string empty = write_config("[lane.pagerank]\n", "empty.ini");  // even without keys
  EXPECT_EQ(parse({"--config", empty}).notes.size(), 1u);
}

// Issue #21: an error quotes at most kExcerptBytes of what it is about, however long, and finds out
// fast (the "did you mean" search skips words whose length alone puts them too far away). A 100 MB
// key: reading it costs a few copies of it; the error line stays short.
TEST_F(TrainOptionsTest, AHugeKeyMakesAShortErrorQuickly) {
  constexpr std::size_t kHuge = 100u << 20;
  const std::string key(kHuge, 'k');
  const std::string path = dir_ / "huge.ini";
  {
    std::ofstream out(path);
    out << "[train]\n" << key << " = 1\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string from_file = parse_error({"--config", path});
  const std::string from_command_line = parse_error({"--train." + key + "=1"});
  const std::string huge_value = parse_error({"--train.lr=" + key});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string excerpt = std::string(kExcerptBytes, 'k') + "... (" + std::to_string(kHuge) + " bytes)";
  EXPECT_EQ(from_file, path + ":2: unknown key '" + excerpt + "' in [train]");
  EXPECT_EQ(from_command_line.rfind("command line: --train." + std::string(kExcerptBytes - 8, 'k') + "... (", 0), 0u)
      << from_command_line.substr(0, 400);
  EXPECT_LT(from_command_line.size(), 400u);
  EXPECT_EQ(huge_value, "command line: --train.lr=" + excerpt + ": expected a number");
  // Linear passes over 100 MB take well under a second each; the old edit-distance table against
  // every key was ~10^9 cells per key. 20 s leaves room for a loaded 2-core machine.
  EXPECT_LT(seconds, 20.0);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // ru_maxrss is KiB. The key is held a few times over (the line read, the scanner's copy, Boost's
  // tokens); 12 copies would mean something copies it per key or escapes it whole.
  EXPECT_LT(static_cast<double>(usage.ru_maxrss) * 1024, 12.0 * kHuge);
}

TEST(IniExcerpt, CutsAtACharacterBoundaryAndSaysTheLength) {
  EXPECT_EQ(printable_excerpt("short"), "short");
  const std::string euros = std::string(kExcerptBytes - 1, 'a') + "\xE2\x82\xAC" + "tail";  // the euro sign straddles the cut
  EXPECT_EQ(printable_excerpt(euros), std::string(kExcerptBytes - 1, 'a') + "... (" + std::to_string(euros.size()) + " bytes)");
}

TEST_F(TrainOptionsTest, LanesMistakes) {
  EXPECT_EQ(parse_error({"--lanes.enabled=a,,b"}),
            "command line: [lanes] enabled = 'a,,b': lane names are letters, digits, '_' and '-', separated by commas");
  EXPECT_EQ(parse_error({"--lanes.enabled=a,b,a"}), "command line: [lanes] enabled = 'a,b,a': 'a' given twice");
  EXPECT_EQ(parse_error({"--lanes.enabled=a,b,c,d,e"}),
            "command line: [lanes] memory_mb = 256 x 5 enabled lanes exceeds stage_memory_mb = 1024");
  EXPECT_EQ(parse_error({"--lanes.stages=0,1"}),
            "command line: [lanes] stages = '0,1': expected all, or distinct stage numbers in [0, 0] separated by commas");
  EXPECT_EQ(parse_error({"--lanes.margin=0"}), "command line: --lanes.margin=0: expected a number in (0, 1]");
  EXPECT_EQ(parse_error({"--lanes.deterministic=yes"}), "command line: --lanes.deterministic=yes: expected true or false");
  EXPECT_EQ(parse_error({"--lanes.profile_iterations=0"}),
            "command line: --lanes.profile_iterations=0: expected an integer >= 1");
  EXPECT_EQ(parse_error({"--lane.x"}), "command line: --lane.x: expected --lane.NAME.key=value");
  EXPECT_EQ(parse_error({"--lane.x.k"}), "command line: --lane.x.k: missing value");
  EXPECT_EQ(parse_error({"--lane.x.k=1", "--lane.x.k=2"}), "command line: --lane.x.k given twice");
  const std::string twice = write_config("[lanes]\nenabled = x\n[lane.x]\nk = 1\nk = 2\n");
  EXPECT_EQ(parse_error({"--config", twice}), twice + ":5: [lane.x] k given twice (first at line 4)");
  const std::string bad_name = write_config("[lane.a b]\n", "bad.ini");
  EXPECT_EQ(parse_error({"--config", bad_name}),
            bad_name + ":1: [lane.a b]: a lane name is letters, digits, '_' and '-', e.g. [lane.pagerank]");
}

TEST_F(TrainOptionsTest, ToIniRoundTripsLanes) {
  const TrainOptions original =
      parse({"--parallel.pp=2", "--lanes.enabled=pagerank,word_count", "--lanes.stages=1", "--lanes.deterministic=true",
             "--lanes.plugins=build/lanes/examples/libpipelane_example_lane.so", "--lane.pagerank.damping=0.85",
             "--lane.word_count.input=data/t.txt", "--lane.word_count.chunk_bytes=4096"});
  const std::string ini = original.to_ini();
  EXPECT_NE(ini.find("[lane.word_count]\nchunk_bytes = 4096\ninput = data/t.txt\n"), std::string::npos) << ini;
  const TrainOptions reread = parse({"--config", write_config(ini, "resolved.ini")});
  EXPECT_EQ(reread.lanes, original.lanes);
  EXPECT_EQ(reread.to_ini(), ini);
}

// ---- untrusted sizes and bytes: one clear line, before anything is allocated ----

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_F(TrainOptionsTest, ModelTooLargeForMemoryNamesTheKeyAndTheSize) {
  // Each used to end in std::bad_alloc, or in an arena asked for 18446741737250788864 bytes.
  const std::string layers = write_config("[model]\nlayers = 1000000\n", "layers.ini");
  std::string message = parse_error({"--config", layers});
  EXPECT_EQ(
      message.rfind(layers + ":2: [model] layers = 1000000 (layers 1000000, d_model 128, vocab_size 256) needs ", 0),
      0u)
      << message;
  EXPECT_TRUE(contains(message, " TiB for parameters, gradients and AdamW moments (")) << message;
  EXPECT_TRUE(contains(message, "(the memory of this host)")) << message;

  const std::string vocab = write_config("[model]\nd_model = 128\nvocab_size = 2147483647\n", "vocab.ini");
  message = parse_error({"--config", vocab});
  EXPECT_EQ(message.rfind(vocab + ":3: [model] vocab_size = 2147483647 (", 0), 0u) << message;
  EXPECT_TRUE(contains(message, "needs 4.0 TiB")) << message;  // (2^31 + 128) x 128 x 16 bytes

  const std::string width = write_config("[model]\nd_model = 1000000000\n", "width.ini");
  message = parse_error({"--config", width});
  EXPECT_EQ(message.rfind(width + ":2: [model] d_model = 1000000000 (", 0), 0u) << message;
  EXPECT_FALSE(contains(message, "bad_alloc")) << message;
}

TEST_F(TrainOptionsTest, ModelSplitOverRanksIsCheckedPerRank) {
  // 1000000 layers over pp = 10000 stages is 0.3 GiB per stage, which parses; on one rank it
  // is 2.9 TiB, which does not.
  EXPECT_TRUE(contains(parse_error({"--model.layers=1000000"}), "more than"));
  EXPECT_EQ(parse_error({"--model.layers=1000000", "--parallel.pp=10000"}), "");
}

TEST_F(TrainOptionsTest, ForwardPassRowsMustFitAnInt) {
  EXPECT_EQ(parse_error({"--train.micro_batch=100000", "--train.global_batch=100000", "--model.seq_len=100000"}),
            "command line: [train] micro_batch = 100000 x [model] seq_len = 100000 tokens per forward pass is "
            "more than 2147483647");
}

TEST_F(TrainOptionsTest, ThreadsHaveAnUpperBound) {
  // threads = 2000 used to hang with no output.
  const std::string path = write_config("[train]\nthreads = 2000\n");
  const std::string message = parse_error({"--config", path});
  EXPECT_EQ(message.rfind(path + ":2: [train] threads = 2000 is more than twice the ", 0), 0u) << message;
  EXPECT_TRUE(contains(message, " cores of this host (0 uses every core)")) << message;
  EXPECT_EQ(parse_error({"--train.threads=1"}), "");
}

TEST_F(TrainOptionsTest, ConfigStartingWithAByteOrderMarkIsRead) {
  const std::string path = write_config("\xEF\xBB\xBF[model]\nlayers = 2\n");
  EXPECT_EQ(parse({"--config", path}).model.layers, 2);
}

TEST_F(TrainOptionsTest, BinaryBytesInAConfigAreEscapedInTheMessage) {
  const std::string value = write_config(std::string("[model]\nlayers = \x01\xff\x1b[2J\n"), "value.ini");
  EXPECT_EQ(parse_error({"--config", value}),
            value + ":2: [model] layers = '\\x01\\xFF\\x1B[2J': expected an integer");
  const std::string line = write_config(std::string("[model]\n\x7f\x00" "ELF\xc3\n", 15), "line.ini");
  EXPECT_EQ(parse_error({"--config", line}),
            line + ":2: expected 'key = value' or '[section]', got '\\x7F\\x00ELF\\xC3'");
  // A byte order mark anywhere but the start is not skipped, and is shown.
  const std::string mark = write_config("[model]\n\xEF\xBB\xBFlayers = 2\n", "mark.ini");
  EXPECT_EQ(parse_error({"--config", mark}), mark + ":2: unknown key '\\u{FEFF}layers' in [model]");
}

TEST(IniScanTest, PrintableKeepsTextAndEscapesTheRest) {
  EXPECT_EQ(printable("lr = 3e-4 caf\xc3\xa9 \xe2\x82\xac"), "lr = 3e-4 caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(printable(std::string("a\0b\tc\r\n", 7)), "a\\x00b\\tc\\x0D\\x0A");
  EXPECT_EQ(printable("\xe2\x80\x8b\xe2\x80\xae\xc2\x85"), "\\u{200B}\\u{202E}\\u{0085}");
  EXPECT_EQ(printable("\xe2\x82"), "\\xE2\\x82");  // a sequence cut short
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xED\\xA0\\x80");  // a surrogate is not UTF-8
}

TEST(IniScanTest, RecordsSectionsEntriesAndLines) {
  std::istringstream text("; c\n[a]\nx = 1\n\n[ b ]  # note\ny=\nz = p q\n[a]\nw = 2\n");
  const IniScan scan = scan_ini(text);
  ASSERT_EQ(scan.sections.size(), 3u);
  EXPECT_EQ(scan.sections[1].name, "b");
  EXPECT_EQ(scan.sections[1].line, 5);
  ASSERT_EQ(scan.entries.size(), 4u);
  EXPECT_EQ(scan.entries[0].section, "a");
  EXPECT_EQ(scan.entries[0].line, 3);
  EXPECT_EQ(scan.entries[1].key, "y");
  EXPECT_EQ(scan.entries[1].value, "");
  EXPECT_EQ(scan.entries[2].value, "p q");
  EXPECT_EQ(scan.entries[3].section, "a");
  EXPECT_EQ(scan.entries[3].line, 9);
}

TEST(IniScanTest, SyntaxErrorHasLine) {
  std::istringstream text("[a]\nx = 1\n= 3\n");
  try {
    scan_ini(text);
    FAIL() << "expected IniSyntaxError";
  } catch (const IniSyntaxError& error) {
    EXPECT_EQ(error.line(), 3);
    EXPECT_NE(std::string(error.what()).find("missing key"), std::string::npos);
  }
}

}  // namespace
}  // namespace pipelane
