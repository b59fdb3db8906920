#pragma once
#include "trainer/config/layer.h"  // trainer/README.md: the layers
// A small INI scanner that remembers line numbers. Boost's parse_config_file reports
// neither the line of a bad key nor accepts ';' comments, and users of a config file
// need "file:line" to find their mistake.
//
// Accepted syntax, one item per line:
//   [section]          (spaces inside the brackets are trimmed)
//   key = value        (spaces around key, '=' and value are trimmed; value may be empty)
//   # comment / ; comment, and blank lines
// A '#' or ';' at the start of a line or after a space or tab starts a comment, so
// "lr = 3e-4  # peak" is the value "3e-4" while "path = a#b" keeps its '#'.
// A UTF-8 byte order mark at the start of the file (Windows editors write one) is skipped.
// The scanner knows nothing about which sections or keys are valid; callers decide.

#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/utf8.h"  // printable(): what the scanner's messages echo goes through it

namespace pipelane {

struct IniSectionHeader {
  std::string name;
  int line = 0;  // 1-based
};

struct IniEntry {
  std::string section;  // the [section] the key appeared under
  std::string key;
  std::string value;
  int line = 0;  // 1-based
};

// Everything in the file, in file order. A section may appear more than once.
struct IniScan {
  std::vector<IniSectionHeader> sections;
  std::vector<IniEntry> entries;
};

// what() is the reason only; the caller prefixes it with "file:line: ".
class IniSyntaxError : public std::runtime_error {
 public:
  IniSyntaxError(int line, const std::string& reason) : std::runtime_error(reason), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

// Throws IniSyntaxError for a line that is neither a comment, a header nor key = value,
// and for a key that appears before any [section].
IniScan scan_ini(std::istream& text);

// What an error message quotes of a key, value or line: printable() of at most its first
// kExcerptBytes bytes (cut at a UTF-8 character boundary), then "... (N bytes)" when longer, so a
// 100 MB key makes a one-line error rather than a 100 MB (or, escaped, 400 MB) one.
constexpr std::size_t kExcerptBytes = 200;
std::string printable_excerpt(std::string_view text);

}  // namespace pipelane
