#include "trainer/cli/command_options.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "trainer/config/cluster_file.h"

namespace pipelane {

namespace po = boost::program_options;

std::string readable_default(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {  // the fewest digits that read back as `value`
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

std::string readable_default(const std::string& value) { return value; }

SubcommandOptions::SubcommandOptions(std::string command, const std::string& usage, const std::string& description)
    : command_(std::move(command)),
      listed_("usage: pipelane " + command_ + (usage.empty() ? "" : " " + usage) + "\n\n" + description +
              "\n\noptions") {
  listed_.add_options()("help,h", "print this help and exit");
}

void SubcommandOptions::add_arguments(const char* name, const po::value_semantic* value, int max_count) {
  unlisted_.add_options()(name, value);
  positional_.add(name, max_count);
}

void SubcommandOptions::accept_train_keys(const std::string& config_help) {
  listed_.add_options()("config", po::value(&train_config_), config_help.c_str());
  takes_train_keys_ = true;
}

namespace {

// An argument no option and no positional argument of the command claimed.
bool unclaimed_argument(const po::option& option) { return option.string_key.empty() && option.position_key != -1; }

// The arguments Boost did not claim, in order, for `pipelane train`'s parser: keys
// (--section.key[=value]) and the values after them. An unknown option without a section is a
// mistyped option of the command, not a key.
std::vector<std::string> train_key_arguments(const po::parsed_options& parsed) {
  std::vector<std::string> out;
  for (const po::option& option : parsed.options) {
    if (!option.unregistered && !unclaimed_argument(option)) continue;
    if (option.unregistered && option.string_key.find('.') == std::string::npos) {
      const std::string& token = option.original_tokens.front();
      throw OptionError("unrecognised option '" + token.substr(0, token.find('=')) + "'");
    }
    out.insert(out.end(), option.original_tokens.begin(), option.original_tokens.end());
  }
  return out;
}

// Boost drops an argument that no positional one claims; a command that takes none refuses it.
void refuse_unclaimed_arguments(const po::parsed_options& parsed) {
  for (const po::option& option : parsed.options)
    if (unclaimed_argument(option)) throw OptionError("unexpected argument '" + option.original_tokens.front() + "'");
}

}  // namespace

std::optional<int> SubcommandOptions::parse(int argc, char** argv, const std::function<void()>& check) {
  try {
    po::options_description all;
    all.add(listed_).add(unlisted_);
    po::command_line_parser parser(argc, argv);
    parser.options(all);
    if (!unlisted_.options().empty()) parser.positional(positional_);
    if (takes_train_keys_) parser.allow_unregistered();
    const po::parsed_options parsed = parser.run();
    po::store(parsed, values_);
    if (values_.count("help")) {
      std::cout << help();
      return 0;
    }
    if (takes_train_keys_) train_arguments_ = train_key_arguments(parsed);
    else refuse_unclaimed_arguments(parsed);
    po::notify(values_);  // after --help: asking for help needs no required option
    if (check) check();
  } catch (const OptionError& e) {
    return usage_error(e.what());
  }
  return std::nullopt;
}

int SubcommandOptions::usage_error(const std::string& message) const {
  std::fprintf(stderr, "pipelane %s: %s (see pipelane %s --help)\n", command_.c_str(), message.c_str(), command_.c_str());
  return 2;
}

bool SubcommandOptions::given(const std::string& name) const {
  const auto found = values_.find(name);
  return found != values_.end() && !found->second.defaulted();
}

bool SubcommandOptions::has_train_arguments() const { return given("config") || !train_arguments_.empty(); }

TrainOptions train_options_from_arguments(const std::vector<std::string>& arguments) {
  std::vector<const char*> argv = {"train"};
  for (const std::string& a : arguments) argv.push_back(a.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

TrainOptions SubcommandOptions::train_options(const std::string& fallback_config) const {
  std::vector<std::string> args;
  const std::string& config = given("config") ? train_config_ : fallback_config;
  if (!config.empty()) args.insert(args.end(), {"--config", config});
  args.insert(args.end(), train_arguments_.begin(), train_arguments_.end());
  try {
    return train_options_from_arguments(args);
  } catch (const ConfigError& e) {
    throw SimInputError(e.what());
  }
}

std::string SubcommandOptions::help() const {
  std::ostringstream text;
  text << listed_ << "\n";
  return text.str();
}

}  // namespace pipelane
