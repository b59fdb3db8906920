// The train options' machinery, shared by the files that implement train_options.h and by
// nothing else: the key table's types (OptionKey, the Settings read from a file and a command
// line), the readers and the cross-key checks. train_options.cpp (the public functions),
// option_table.cpp (the key table), option_reading.cpp (file and command line) and
// option_checks.cpp (checks that involve more than one key).
#pragma once
#include "trainer/config/layer.h"  // trainer/README.md: the layers
#include <algorithm>
#include <boost/program_options.hpp>
#include <unistd.h>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "datasets/data_error.h"
#include "datasets/sharded_sampler.h"
#include "datasets/tokenizer_registry.h"
#include "model/gpt_config.h"
#include "trainer/config/ini_scan.h"


#include "trainer/config/train_options.h"

namespace po = boost::program_options;

namespace pipelane::train_option_detail {

// ---------------------------------------------------------------------------------------
// Value text <-> field conversion. Parsing is strict (the whole text must be consumed) so
// "12abc" or "1.5" for an integer is an error rather than a silent 12 or 1.

template <class Integer>
std::optional<Integer> parse_integer(std::string_view text) {
  Integer value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

inline std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Shortest text that parses back to the same double, so to_ini() round-trips exactly.
inline std::string format_number(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// The accepted interval of a floating-point key, e.g. lr > 0 or beta1 in [0, 1).
struct NumberRange {
  double low = -std::numeric_limits<double>::infinity();
  bool low_inclusive = true;
  double high = std::numeric_limits<double>::infinity();
  bool high_inclusive = true;

  bool contains(double value) const {
    const bool above_low = low_inclusive ? value >= low : value > low;
    const bool below_high = high_inclusive ? value <= high : value < high;
    return above_low && below_high;
  }
  std::string describe() const {
    if (std::isinf(high)) return (low_inclusive ? ">= " : "> ") + format_number(low);
    return std::string("in ") + (low_inclusive ? "[" : "(") + format_number(low) + ", " +
           format_number(high) + (high_inclusive ? "]" : ")");
  }
};

inline NumberRange at_least(double low) { return {low, true}; }
inline NumberRange greater_than(double low) { return {low, false}; }
inline NumberRange from_up_to_excluding(double low, double high) { return {low, true, high, false}; }


// ---------------------------------------------------------------------------------------
// The key table: one OptionKey per configurable field. Help, to_ini(), file parsing and
// command-line parsing all walk this table, so they cannot disagree about the keys.

struct OptionKey {
  std::string section;      // "train"
  std::string name;         // "lr"
  std::string value_name;   // shown in --help: INT, NUM, TEXT or the choices
  std::string description;  // one line for --help
  std::function<std::string(const TrainOptions&)> format;
  // Stores the text into the field, or returns why it cannot ("expected an integer >= 1").
  std::function<std::optional<std::string>(TrainOptions&, std::string_view)> assign;

  std::string full_name() const { return section + "." + name; }
};

std::vector<OptionKey> train_option_keys();
// Sections in table order, each once.
std::vector<std::string> section_names(const std::vector<OptionKey>& keys);

// Only close matches: a suggestion for a completely different word is noise.
std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates);

// ---------------------------------------------------------------------------------------
// Settings: the raw text of each key that was given, and where it came from.

struct Setting {
  std::string value;
  std::string location;  // "configs/tiny.ini:7" or "command line"
  bool from_command_line = false;
};
using Settings = std::map<std::string, Setting>;  // by "section.key"

std::string value_error(const OptionKey& key, const Setting& setting, const std::string& reason);

// [lane.NAME] sections are not in the key table: their keys belong to lane NAME. They travel in
// Settings as "lane.NAME.key", plus a "lane.NAME" marker locating the section header.
constexpr std::string_view kLaneSectionPrefix = "lane.";
inline bool is_lane_section(std::string_view section) {
  return section.substr(0, kLaneSectionPrefix.size()) == kLaneSectionPrefix;
}
bool valid_lane_name(std::string_view name);
std::string trim(std::string_view text);
// "a, b,c" -> {"a", "b", "c"}; "" -> {}; an empty item ("a,,b") is kept as "" for the caller to reject.
std::vector<std::string> split_list(std::string_view text);

Settings read_config_file(const std::string& path, const std::vector<OptionKey>& keys);
po::options_description command_line_description(const std::vector<OptionKey>& keys);
struct CommandLine {
  Settings settings;
  std::optional<std::string> config_path;
  bool help = false;
};
CommandLine read_command_line(int argc, const char* const* argv, const std::vector<OptionKey>& keys);

// Checks that involve more than one key (option_checks.cpp).
void apply_arch_defaults(ModelOptions& m, const Settings& settings);
void check_combinations(const TrainOptions& options, const Settings& settings);
void check_resources(const TrainOptions& options, const Settings& settings);
void check_lanes(const TrainOptions& options, const Settings& settings);
std::vector<std::string> lane_section_notes(const LanesOptions& lanes, const Settings& settings);
void check_lanes_values(const TrainOptions& options, const Settings& settings);

}  // namespace pipelane::train_option_detail
