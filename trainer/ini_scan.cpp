#include "trainer/ini_scan.h"

#include <cstdio>
#include <string_view>

#include "datasets/utf8.h"

namespace pipelane {
namespace {

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

// Byte length of the UTF-8 sequence a lead byte announces (1 for ASCII and for invalid leads).
std::size_t sequence_length(unsigned char lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF8 ? 4 : 1;
}

// Code points that print as nothing or break a line.
bool invisible(char32_t c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0xAD || (c >= 0x200B && c <= 0x200F) || (c >= 0x2028 && c <= 0x202E) ||
         (c >= 0x2060 && c <= 0x206F) || c == 0xFEFF;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view text) {
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

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char escape[16];
  for (std::size_t pos = 0; pos < text.size();) {
    const auto byte = static_cast<unsigned char>(text[pos]);
    if (byte == '\t') {
      out += "\\t";
      ++pos;
      continue;
    }
    if (byte < 0x20 || byte == 0x7F) {
      std::snprintf(escape, sizeof escape, "\\x%02X", byte);
      out += escape;
      ++pos;
      continue;
    }
    if (byte < 0x80) {
      out += static_cast<char>(byte);
      ++pos;
      continue;
    }
    const std::size_t length = sequence_length(byte);
    const std::string_view sequence = text.substr(pos, length);
    if (length == 1 || sequence.size() < length || find_invalid_utf8(sequence) != std::string_view::npos) {
      std::snprintf(escape, sizeof escape, "\\x%02X", byte);
      out += escape;
      ++pos;
      continue;
    }
    std::size_t decoded_length = 0;
    const char32_t c = decode_utf8_at(sequence, 0, decoded_length);
    if (invisible(c)) {
      std::snprintf(escape, sizeof escape, "\\u{%04X}", static_cast<unsigned>(c));
      out += escape;
    } else {
      out += sequence;
    }
    pos += length;
  }
  return out;
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
    const std::string_view line = trim(without_comment(raw_line));
    if (line.empty()) continue;

    if (line.front() == '[') {
      const std::string_view inside = line.substr(1);
      const std::size_t close = inside.find(']');
      const std::string_view name = close == std::string_view::npos ? "" : trim(inside.substr(0, close));
      if (close == std::string_view::npos || close + 1 != inside.size() || name.empty() ||
          name.find('[') != std::string_view::npos) {
        throw IniSyntaxError(line_number, "malformed section header '" + printable(line) + "'");
      }
      current_section = std::string(name);
      inside_section = true;
      scan.sections.push_back({current_section, line_number});
      continue;
    }

    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) {
      throw IniSyntaxError(line_number,
                           "expected 'key = value' or '[section]', got '" + printable(line) + "'");
    }
    const std::string_view key = trim(line.substr(0, equals));
    if (key.empty()) {
      throw IniSyntaxError(line_number, "missing key before '=' in '" + printable(line) + "'");
    }
    if (!inside_section) {
      throw IniSyntaxError(line_number, "key '" + printable(key) + "' appears before any [section]");
    }
    scan.entries.push_back(
        {current_section, std::string(key), std::string(trim(line.substr(equals + 1))), line_number});
  }
  return scan;
}

}  // namespace pipelane
