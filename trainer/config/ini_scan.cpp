#include "trainer/config/ini_scan.h"

#include <string_view>

#include "datasets/utf8.h"

namespace pipelane {
namespace {

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";  // Windows editors start UTF-8 files with it

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim_view(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

std::string_view without_comment(std::string_view line) {
  for (std::size_t i = 0; i < line.size(); ++i) {
    const bool starts_comment = line[i] == '#' || line[i] == ';';
    if (starts_comment && (i == 0 || is_blank(line[i - 1]))) return line.substr(0, i);
  }
  return line;
}

}  // namespace

std::string printable_excerpt(std::string_view text) {
  if (text.size() <= kExcerptBytes) return printable(text);
  std::size_t cut = kExcerptBytes;
  // Back over UTF-8 continuation bytes (10xxxxxx), at most three: a character is never split.
  for (int i = 0; i < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80; ++i) --cut;
  return printable(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

IniScan scan_ini(std::istream& text) {
  IniScan scan;
  std::string current_section;
  bool inside_section = false;
  std::string raw_line;
  int line_number = 0;
  while (std::getline(text, raw_line)) {
    ++line_number;
    if (line_number == 1 && std::string_view(raw_line).substr(0, kByteOrderMark.size()) == kByteOrderMark)
      raw_line.erase(0, kByteOrderMark.size());
    const std::string_view line = trim_view(without_comment(raw_line));
    if (line.empty()) continue;

    if (line.front() == '[') {
      const std::string_view inside = line.substr(1);
      const std::size_t close = inside.find(']');
      const std::string_view name = close == std::string_view::npos ? "" : trim_view(inside.substr(0, close));
      if (close == std::string_view::npos || close + 1 != inside.size() || name.empty() ||
          name.find('[') != std::string_view::npos) {
        throw IniSyntaxError(line_number, "malformed section header '" + printable_excerpt(line) + "'");
      }
      current_section = std::string(name);
      inside_section = true;
      scan.sections.push_back({current_section, line_number});
      continue;
    }

    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) {
      throw IniSyntaxError(line_number,
                           "expected 'key = value' or '[section]', got '" + printable_excerpt(line) + "'");
    }
    const std::string_view key = trim_view(line.substr(0, equals));
    if (key.empty()) {
      throw IniSyntaxError(line_number, "missing key before '=' in '" + printable_excerpt(line) + "'");
    }
    if (!inside_section) {
      throw IniSyntaxError(line_number, "key '" + printable_excerpt(key) + "' appears before any [section]");
    }
    scan.entries.push_back(
        {current_section, std::string(key), std::string(trim_view(line.substr(equals + 1))), line_number});
  }
  return scan;
}

}  // namespace pipelane
