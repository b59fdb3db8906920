// Every subcommand's command line, through the `pipelane` binary: --help exits 0 in the common
// format (usage line, description, options with readable defaults), and an unknown option or a
// stray argument is one line on stderr naming it, exit 2. The subcommands are read from
// `pipelane --help`, so a new one is covered without touching this file. `train` parses its keys
// through trainer/config's table: its help and error are its own, held to the same exit codes and
// one line.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string pipelane_binary() {
  const char* build = std::getenv("PIPELANE_BUILD_DIR");
  return std::string(build ? build : "build") + "/pipelane";
}

struct Outcome {  // of one run of the binary
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::string text;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) text.append(buffer, n);
    std::fclose(f);
  }
  return text;
}

// `pipelane ARGS` (each argument a plain word: no quoting needed), stdout and stderr apart.
Outcome run_pipelane(const std::string& args) {
  const std::string base = ::testing::TempDir() + "pipelane_command_line." + std::to_string(::getpid());
  const std::string command = pipelane_binary() + " " + args + " >" + base + ".out 2>" + base + ".err </dev/null";
  const int status = std::system(command.c_str());
  Outcome run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = slurp(base + ".out");
  run.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return run;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The subcommands `pipelane --help` lists under "commands:" (not --version).
std::vector<std::string> listed_subcommands() {
  const Outcome help = run_pipelane("--help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  std::vector<std::string> names;
  const std::regex entry(R"(^  ([a-z][a-z-]*) +\S.*)");
  for (const std::string& line : lines_of(help.out)) {
    std::smatch m;
    if (std::regex_match(line, m, entry)) names.push_back(m[1]);
  }
  return names;
}

std::vector<std::string> subcommands_but_train() {
  std::vector<std::string> names;
  for (const std::string& name : listed_subcommands())
    if (name != "train") names.push_back(name);
  return names;
}

TEST(CommandLine, EverySubcommandIsListed) {
  const std::vector<std::string> names = listed_subcommands();
  for (const char* expected : {"train", "prepare-data", "schedule", "simulate", "plan", "sites", "generate", "eval",
                               "import", "export", "report", "lane-bench", "devices"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
}

TEST(CommandLine, HelpHasTheCommonFormat) {
  for (const std::string& command : subcommands_but_train()) {
    SCOPED_TRACE(command);
    const Outcome help = run_pipelane(command + " --help");
    EXPECT_EQ(help.exit_code, 0) << help.err;
    EXPECT_EQ(help.err, "");
    const std::vector<std::string> lines = lines_of(help.out);
    ASSERT_GE(lines.size(), 5u) << help.out;
    // usage: pipelane CMD ..., a blank line, the description, a blank line, options: with --help first.
    EXPECT_EQ(lines[0].rfind("usage: pipelane " + command, 0), 0u) << help.out;
    const auto options = std::find(lines.begin(), lines.end(), "options:");
    ASSERT_NE(options, lines.end()) << help.out;
    const auto description = std::find(lines.begin(), options, "");
    ASSERT_NE(description, options) << help.out;
    EXPECT_TRUE(description + 1 < options - 1 && !description[1].empty()) << "no description:\n" << help.out;
    EXPECT_EQ(options[-1], "") << help.out;
    ASSERT_NE(options + 1, lines.end());
    EXPECT_NE(options[1].find("-h [ --help ]"), std::string::npos) << options[1];
    EXPECT_NE(options[1].find("print this help and exit"), std::string::npos) << options[1];
    // A default as a person writes it: no floating-point noise such as 0.80000000000000004.
    const std::regex noisy_default("\\(=-?[0-9]*\\.[0-9]{8,}");
    EXPECT_FALSE(std::regex_search(help.out, noisy_default)) << help.out;
    EXPECT_EQ(run_pipelane(command + " -h").out, help.out);
  }
}

TEST(CommandLine, DefaultsArePrintedReadably) {
  const Outcome help = run_pipelane("generate --help");
  EXPECT_NE(help.out.find("--temperature arg (=0.8)"), std::string::npos) << help.out;
  EXPECT_NE(run_pipelane("prepare-data --help").out.find("(=0.05)"), std::string::npos);
}

// The tokenizer options of eval and generate list every tokenizer the registry has (issue #25).
TEST(CommandLine, TokenizerHelpListsEveryTokenizer) {
  for (const std::string command : {"eval", "generate"}) {
    SCOPED_TRACE(command);
    const Outcome help = run_pipelane(command + " --help");
    for (const char* name : {"byte", "gpt2", "cl100k", "o200k", "llama3", "hf:PATH/tokenizer.json", "spm:PATH.model"})
      EXPECT_NE(help.out.find(name), std::string::npos) << name << "\n" << help.out;
  }
}

// lane-bench takes train's option names (--lane.NAME.key, --lanes.plugins, --config's [lane.NAME]);
// the older --set and --plugin still work.
TEST(CommandLine, LaneBenchTakesTrainsOptionNames) {
  const Outcome ran = run_pipelane("lane-bench pagerank --lane.pagerank.generate=rmat --lane.pagerank.scale=8 "
                                   "--seconds 0.2 --json");
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.out.find("\"work_unit\":\"edges\""), std::string::npos) << ran.out;
  const Outcome old = run_pipelane("lane-bench pagerank --set generate=rmat --set scale=8 --seconds 0.2 --json");
  EXPECT_EQ(old.exit_code, 0) << old.err;
  const Outcome plugin = run_pipelane("lane-bench word_count --lanes.plugins=/nonexistent/lane.so --seconds 0.1");
  EXPECT_NE(plugin.exit_code, 0);
  EXPECT_NE(plugin.err.find("/nonexistent/lane.so"), std::string::npos) << plugin.err;
  // The config's [lane.pagerank], one key replaced on the command line, as train would take them.
  const Outcome config = run_pipelane("lane-bench pagerank --config configs/lanes-pp2.ini --lane.pagerank.scale=8 "
                                      "--seconds 0.2 --json");
  EXPECT_EQ(config.exit_code, 0) << config.err;
}

TEST(CommandLine, UnknownOptionIsOneLineNamingItAndExitTwo) {
  for (const std::string& command : subcommands_but_train()) {
    SCOPED_TRACE(command);
    const Outcome bad = run_pipelane(command + " --no-such-option");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_EQ(bad.out, "");
    EXPECT_EQ(bad.err, "pipelane " + command + ": unrecognised option '--no-such-option' (see pipelane " + command +
                           " --help)\n");
  }
}

TEST(CommandLine, OptionErrorsNameTheOption) {
  const Outcome missing = run_pipelane("eval --model");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(lines_of(missing.err).size(), 1u) << missing.err;
  EXPECT_NE(missing.err.find("'--model'"), std::string::npos) << missing.err;
  const Outcome not_a_number = run_pipelane("schedule --pp two --microbatches 4 --schedule 1f1b");
  EXPECT_EQ(not_a_number.exit_code, 2);
  EXPECT_EQ(lines_of(not_a_number.err).size(), 1u) << not_a_number.err;
  EXPECT_NE(not_a_number.err.find("--pp"), std::string::npos) << not_a_number.err;
  EXPECT_NE(not_a_number.err.find("(see pipelane schedule --help)"), std::string::npos) << not_a_number.err;
  const Outcome required = run_pipelane("prepare-data --input x.txt");
  EXPECT_EQ(required.exit_code, 2);
  EXPECT_NE(required.err.find("'--output' is required"), std::string::npos) << required.err;
}

// Commands without positional arguments refuse one instead of dropping it.
TEST(CommandLine, StrayArgumentIsOneLineNamingIt) {
  for (const std::string command : {"prepare-data", "schedule", "generate", "eval", "import", "export", "devices"}) {
    SCOPED_TRACE(command);
    const Outcome bad = run_pipelane(command + " stray");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_EQ(bad.err, "pipelane " + command + ": unexpected argument 'stray' (see pipelane " + command +
                           " --help)\n");
  }
}

// simulate, plan and sites take `pipelane train`'s keys: one with a section goes to train's parser
// (which names an unknown one), one without is the command's unknown option.
TEST(CommandLine, TrainKeysGoToTrainsParser) {
  for (const std::string command : {"simulate", "plan", "sites"}) {
    SCOPED_TRACE(command);
    const Outcome bad = run_pipelane(command + " --config configs/tiny.ini --cluster configs/clusters/a100-ethernet.ini "
                                           "--train.no_such_key=1");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_EQ(bad.err, "pipelane " + command + ": command line: --train.no_such_key: unknown key\n");
  }
  const Outcome sites = run_pipelane("sites --cluster configs/clusters/wan-emulated.ini --config configs/tiny.ini "
                                 "--parallel.pp=2 --shell");
  EXPECT_EQ(sites.exit_code, 0) << sites.err;
  EXPECT_NE(sites.out.find("placement "), std::string::npos) << sites.out;
}

TEST(CommandLine, TrainHelpAndUnknownOption) {
  const Outcome help = run_pipelane("train --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_EQ(help.out.rfind("usage: pipelane train", 0), 0u) << help.out;
  const Outcome bad = run_pipelane("train --no-such-option");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(lines_of(bad.err).size(), 1u) << bad.err;
  EXPECT_EQ(bad.err.rfind("pipelane train: ", 0), 0u) << bad.err;
  EXPECT_NE(bad.err.find("--no-such-option"), std::string::npos) << bad.err;
}

}  // namespace
