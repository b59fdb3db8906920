// Reading the settings: a config file, the command line, and what a misspelt key is close to.
#include "trainer/config/option_machinery.h"

namespace pipelane::train_option_detail {

// ---------------------------------------------------------------------------------------
// "Did you mean" suggestions.

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

// Only close matches: a suggestion for a completely different word is noise.
std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates) {
  constexpr std::size_t kMaxDistance = 2;
  std::optional<std::string> best;
  std::size_t best_distance = kMaxDistance + 1;
  for (const std::string& candidate : candidates) {
    // The distance is at least the difference in length: a far longer word (a 100 MB key) is
    // skipped without the quadratic table.
    if (std::max(word.size(), candidate.size()) - std::min(word.size(), candidate.size()) > kMaxDistance) continue;
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance && distance < word.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}


std::string value_error(const OptionKey& key, const Setting& setting, const std::string& reason) {
  if (setting.from_command_line)
    return "command line: --" + key.full_name() + "=" + printable_excerpt(setting.value) + ": " + reason;
  return setting.location + ": [" + key.section + "] " + key.name + " = '" + printable_excerpt(setting.value) + "': " + reason;
}

// [lane.NAME] sections are not in the key table: their keys belong to lane NAME. They travel in
// Settings as "lane.NAME.key", plus a "lane.NAME" marker locating the section header.

bool valid_lane_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::string trim(std::string_view text) {
  const std::size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  return std::string(text.substr(begin, text.find_last_not_of(" \t") - begin + 1));
}

// "a, b,c" -> {"a", "b", "c"}; "" -> {}; an empty item ("a,,b") is kept as "" for the caller to reject.
std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> items;
  if (trim(text).empty()) return items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    items.push_back(trim(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

Settings read_config_file(const std::string& path, const std::vector<OptionKey>& keys) {
  std::error_code filesystem_error;
  if (!std::filesystem::exists(path, filesystem_error)) throw ConfigError(path + ": no such config file");
  std::ifstream file(path);
  if (!file || std::filesystem::is_directory(path, filesystem_error)) {
    throw ConfigError(path + ": cannot read config file");
  }

  IniScan scan;
  try {
    scan = scan_ini(file);
  } catch (const IniSyntaxError& error) {
    throw ConfigError(path + ":" + std::to_string(error.line()) + ": " + error.what());
  }
  const auto location = [&path](int line) { return path + ":" + std::to_string(line); };

  const std::vector<std::string> known_sections = section_names(keys);
  Settings settings;
  for (const IniSectionHeader& header : scan.sections) {
    if (std::find(known_sections.begin(), known_sections.end(), header.name) != known_sections.end()) continue;
    if (is_lane_section(header.name)) {
      if (!valid_lane_name(std::string_view(header.name).substr(kLaneSectionPrefix.size())))
        throw ConfigError(location(header.line) + ": [" + printable_excerpt(header.name) +
                          "]: a lane name is letters, digits, '_' and '-', e.g. [lane.pagerank]");
      settings.emplace(header.name, Setting{"", location(header.line), false});  // first header wins
      continue;
    }
    std::string message = location(header.line) + ": unknown section [" + printable_excerpt(header.name) + "]";
    if (const auto suggestion = closest(header.name, known_sections)) message += " (did you mean [" + *suggestion + "]?)";
    throw ConfigError(message);
  }

  std::map<std::string, int> line_of_key;
  for (const IniEntry& entry : scan.entries) {
    if (is_lane_section(entry.section)) {  // any key: the lane validates its own
      const std::string full_name = entry.section + "." + entry.key;
      if (const auto previous = line_of_key.find(full_name); previous != line_of_key.end())
        throw ConfigError(location(entry.line) + ": [" + printable_excerpt(entry.section) + "] " + printable_excerpt(entry.key) +
                          " given twice (first at line " + std::to_string(previous->second) + ")");
      line_of_key[full_name] = entry.line;
      settings[full_name] = {entry.value, location(entry.line), false};
      continue;
    }
    std::vector<std::string> section_keys;
    for (const OptionKey& key : keys) {
      if (key.section == entry.section) section_keys.push_back(key.name);
    }
    if (std::find(section_keys.begin(), section_keys.end(), entry.key) == section_keys.end()) {
      std::string message =
          location(entry.line) + ": unknown key '" + printable_excerpt(entry.key) + "' in [" + entry.section + "]";
      if (const auto suggestion = closest(entry.key, section_keys)) message += " (did you mean '" + *suggestion + "'?)";
      throw ConfigError(message);
    }
    const std::string full_name = entry.section + "." + entry.key;
    if (const auto previous = line_of_key.find(full_name); previous != line_of_key.end()) {
      throw ConfigError(location(entry.line) + ": [" + entry.section + "] " + entry.key +
                        " given twice (first at line " + std::to_string(previous->second) + ")");
    }
    line_of_key[full_name] = entry.line;
    settings[full_name] = {entry.value, location(entry.line), false};
  }
  return settings;
}

// ---------------------------------------------------------------------------------------
// Command line, through Boost.Program_options: it handles --key=value and --key value.

constexpr unsigned kHelpLineLength = 120;

po::options_description command_line_description(const std::vector<OptionKey>& keys) {
  const TrainOptions defaults;
  po::options_description all(kHelpLineLength);
  po::options_description general("general", kHelpLineLength);
  general.add_options()
      ("config", po::value<std::string>()->value_name("FILE"), "INI config file with the sections below")
      ("help", "print this help and exit");
  all.add(general);
  // One options_description per section so --help groups the keys.
  for (const std::string& section : section_names(keys)) {
    po::options_description group("[" + section + "]", kHelpLineLength);
    for (const OptionKey& key : keys) {
      if (key.section != section) continue;
      const std::string default_text = key.format(defaults);
      group.add_options()(
          key.full_name().c_str(),
          po::value<std::string>()->value_name(key.value_name)->default_value(default_text, default_text.empty() ? "\"\"" : default_text),
          key.description.c_str());
    }
    all.add(group);
  }
  return all;
}


CommandLine read_command_line(int argc, const char* const* argv, const std::vector<OptionKey>& keys) {
  Settings lane_settings;
  std::vector<const char*> rest(argv, argv + std::min(argc, 1));
  // Boost refuses "--key=" (an empty value after '='), which is how a user clears a key such as
  // --lanes.enabled=; the same value as a separate empty token is accepted.
  std::vector<std::string> cleared;
  cleared.reserve(static_cast<std::size_t>(argc));
  static const char kEmpty[] = "";
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    // No key is anywhere near this long; Boost would copy such a name once per key it compares
    // (a 100 MB one: tens of seconds), so it is refused here, quoted in part like any other.
    if (const std::string_view name = argument.substr(0, argument.find('='));
        name.size() > kExcerptBytes && name.substr(0, 2 + kLaneSectionPrefix.size()) != "--lane.")
      throw ConfigError("command line: " + printable_excerpt(name) + ": unknown key");
    if (argument.substr(0, 2 + kLaneSectionPrefix.size()) != "--lane.") {
      if (argument.size() > 3 && argument.substr(0, 2) == "--" && argument.back() == '=' &&
          argument.find('=') == argument.size() - 1) {
        rest.push_back(cleared.emplace_back(argument.substr(0, argument.size() - 1)).c_str());
        rest.push_back(kEmpty);
      } else {
        rest.push_back(argv[i]);
      }
      continue;
    }
    const std::size_t equals = argument.find('=');
    const std::string name(argument.substr(2, equals == std::string_view::npos ? std::string_view::npos : equals - 2));
    const std::size_t dot = name.find('.', kLaneSectionPrefix.size());
    if (dot == std::string::npos || dot + 1 == name.size() ||
        !valid_lane_name(std::string_view(name).substr(kLaneSectionPrefix.size(), dot - kLaneSectionPrefix.size())))
      throw ConfigError("command line: --" + printable_excerpt(name) + ": expected --lane.NAME.key=value");
    std::string value;
    if (equals != std::string_view::npos) {
      value = std::string(argument.substr(equals + 1));
    } else if (i + 1 < argc && std::string_view(argv[i + 1]).substr(0, 2) != "--") {
      value = argv[++i];
    } else {
      throw ConfigError("command line: --" + printable_excerpt(name) + ": missing value");
    }
    if (lane_settings.count(name)) throw ConfigError("command line: --" + printable_excerpt(name) + " given twice");
    lane_settings[name] = {value, "command line", true};
    lane_settings.emplace(name.substr(0, dot), Setting{"", "command line", true});  // the section marker
  }
  argc = static_cast<int>(rest.size());
  argv = rest.data();

  po::parsed_options parsed(nullptr);
  try {
    // Without guessing, --train.l is an error instead of silently meaning --train.lr.
    const int style = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;
    parsed = po::command_line_parser(argc, argv).options(command_line_description(keys)).style(style).run();
  } catch (const po::unknown_option& error) {
    std::vector<std::string> full_names;
    for (const OptionKey& key : keys) full_names.push_back(key.full_name());
    // Boost reports the whole token ("--train.lrr=3"); the key alone reads better.
    const std::string token = error.get_option_name();
    const std::string option = token.substr(0, token.find('='));
    std::string message = "command line: " + printable_excerpt(option) + ": unknown key";
    const std::string_view bare_name = std::string_view(option).substr(option.find_first_not_of('-'));
    if (const auto suggestion = closest(bare_name, full_names)) message += " (did you mean --" + *suggestion + "?)";
    throw ConfigError(message);
  } catch (const po::error& error) {
    throw ConfigError("command line: " + printable_excerpt(error.what()));
  }

  CommandLine command_line;
  for (const po::option& option : parsed.options) {
    if (option.string_key.empty() || option.position_key >= 0) {
      std::string argument;
      for (const std::string& token : option.original_tokens) argument += token;
      throw ConfigError("command line: unexpected argument '" + printable_excerpt(argument) + "'");
    }
    if (option.string_key == "help") {
      command_line.help = true;
      continue;
    }
    if (option.string_key == "config") {
      if (command_line.config_path) throw ConfigError("command line: --config given twice");
      command_line.config_path = option.value.at(0);
      continue;
    }
    if (command_line.settings.count(option.string_key)) {
      throw ConfigError("command line: --" + option.string_key + " given twice");
    }
    command_line.settings[option.string_key] = {option.value.at(0), "command line", true};
  }
  command_line.settings.merge(lane_settings);
  return command_line;
}


}  // namespace pipelane::train_option_detail
