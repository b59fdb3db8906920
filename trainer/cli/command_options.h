// The one option parser of every subcommand but `train` (whose keys are trainer/config's table):
// Boost.Program_options behind one class, so every command has the same --help (usage line,
// description, options with their defaults), the same one-line usage errors
// ("pipelane eval: --model and --data are required (see pipelane eval --help)", exit 2) and, where a
// command takes `pipelane train`'s keys (simulate, plan, sites), the same --config FILE and
// --section.key=value handling.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/program_options.hpp>

#include "trainer/config/train_options.h"

namespace pipelane {

// A bad command line: what a command's check throws; printed as one line naming the command and
// its --help, exit 2.
using OptionError = boost::program_options::error;

// A default as a person writes it: 0.8 (not Boost's 0.80000000000000004), 1e-08, 256, text.
std::string readable_default(double value);
std::string readable_default(const std::string& value);
template <class T>
  requires std::is_integral_v<T>
std::string readable_default(T value) {
  return std::to_string(value);
}

// An option's value whose default is what `target` holds now, printed readably by --help.
template <class T>
boost::program_options::typed_value<T>* value_with_default(T* target) {
  return boost::program_options::value(target)->default_value(*target, readable_default(*target));
}

// `pipelane train`'s options from its arguments (argv without argv[0]): ConfigError otherwise.
TrainOptions train_options_from_arguments(const std::vector<std::string>& arguments);

class SubcommandOptions {
 public:
  // `usage` follows "usage: pipelane COMMAND " on --help's first line; `description` (lines of at
  // most 100 characters) follows after a blank line, then the options.
  SubcommandOptions(std::string command, const std::string& usage, const std::string& description);
  SubcommandOptions(const SubcommandOptions&) = delete;  // --config's value is stored in it
  SubcommandOptions& operator=(const SubcommandOptions&) = delete;

  // The options --help lists, in order (-h/--help comes first, added here).
  boost::program_options::options_description_easy_init add_options() { return listed_.add_options(); }
  // Arguments without an option name, in order: report's RUN_DIRs, lane-bench's NAME. At most
  // `max_count` of them (-1: any number); the usage line names them, the option list does not.
  void add_arguments(const char* name, const boost::program_options::value_semantic* value, int max_count);
  // `pipelane train`'s keys: --config FILE (listed, with `config_help`) and --section.key=value (or
  // --section.key value, --lane.NAME.key=value), read by train_options(). Any other unknown option
  // is a usage error, as in every command.
  void accept_train_keys(const std::string& config_help);

  // Reads argv (argv[0] is the command's name), then runs `check`, which throws OptionError for a
  // bad combination. nullopt: go on; otherwise the exit code to return: 0 after --help (printed to
  // stdout), 2 after a usage error (one line on stderr).
  std::optional<int> parse(int argc, char** argv, const std::function<void()>& check = {});

  // Whether option `name` was on the command line (not just defaulted).
  bool given(const std::string& name) const;
  // With accept_train_keys: whether --config or any key was given, and --config's file ("" for none).
  bool has_train_arguments() const;
  const std::string& train_config() const { return train_config_; }
  // The training options those arguments give; `fallback_config` is read when no --config was
  // given ("" for none). SimInputError (one line, ConfigError's text) otherwise.
  TrainOptions train_options(const std::string& fallback_config = "") const;

  std::string help() const;
  // Prints a usage error found after parse() (one that needs the config: "give --cluster FILE
  // (or [wan] cluster)") as parse() does, and returns its exit code, 2.
  int usage_error(const std::string& message) const;

 private:
  std::string command_;
  boost::program_options::options_description listed_;
  boost::program_options::options_description unlisted_;
  boost::program_options::positional_options_description positional_;
  boost::program_options::variables_map values_;
  bool takes_train_keys_ = false;
  std::string train_config_;
  std::vector<std::string> train_arguments_;  // the keys, as given (--config apart)
};

}  // namespace pipelane
