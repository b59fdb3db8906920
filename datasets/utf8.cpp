#include "datasets/utf8.h"

#include <cstdio>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

// Length of the valid sequence at text[pos], or 0 with `bad` = length of the maximal invalid
// subpart (at least 1): the bytes that the WHATWG decoder replaces with one U+FFFD.
std::size_t valid_sequence_length(std::string_view text, std::size_t pos, std::size_t& bad) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[pos + k]); };
  const unsigned char b0 = at(0);
  bad = 1;
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char low = 0x80, high = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) need = 1;
  else if (b0 >= 0xe0 && b0 <= 0xef) {
    need = 2;
    if (b0 == 0xe0) low = 0xa0;       // overlong
    if (b0 == 0xed) high = 0x9f;      // surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    need = 3;
    if (b0 == 0xf0) low = 0x90;       // overlong
    if (b0 == 0xf4) high = 0x8f;      // above U+10FFFF
  } else {
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (pos + k >= text.size()) { bad = k; return 0; }
    const unsigned char b = at(k);
    const bool ok = k == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xbf);
    if (!ok) { bad = k; return 0; }
  }
  return need + 1;
}

// Code points that print as nothing or break a line.
bool invisible(char32_t c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0xAD || (c >= 0x200B && c <= 0x200F) || (c >= 0x2028 && c <= 0x202E) ||
         (c >= 0x2060 && c <= 0x206F) || c == 0xFEFF;
}

}  // namespace

InvalidUtf8 parse_invalid_utf8(std::string_view name) {
  if (name == "replace") return InvalidUtf8::kReplace;
  if (name == "fail") return InvalidUtf8::kFail;
  throw DataError("unknown invalid-UTF-8 policy '" + std::string(name) + "' (expected 'replace' or 'fail')");
}

std::size_t find_invalid_utf8(std::string_view text) {
  std::size_t pos = 0, bad = 0;
  while (pos < text.size()) {
    // ASCII fast path: most corpora are mostly ASCII.
    if (static_cast<unsigned char>(text[pos]) < 0x80) { ++pos; continue; }
    const std::size_t n = valid_sequence_length(text, pos, bad);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

std::string repair_utf8(std::string_view text, InvalidUtf8 policy, const std::string& where,
                        std::size_t* replaced, std::uint64_t offset) {
  std::size_t first_bad = find_invalid_utf8(text);
  if (replaced) *replaced = 0;
  if (first_bad == std::string_view::npos) return std::string(text);
  if (policy == InvalidUtf8::kFail)
    throw DataError(where + ": invalid UTF-8 at byte " + std::to_string(offset + first_bad) +
                    " (expected UTF-8 text; use --invalid-utf8 replace to substitute U+FFFD)");
  std::string out(text.substr(0, first_bad));
  std::size_t pos = first_bad, bad = 0, count = 0;
  while (pos < text.size()) {
    const std::size_t n = valid_sequence_length(text, pos, bad);
    if (n > 0) {
      out.append(text.substr(pos, n));
      pos += n;
    } else {
      out.append("\xEF\xBF\xBD");
      ++count;
      pos += bad;
    }
  }
  if (replaced) *replaced = count;
  return out;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char escape[16];
  for (std::size_t pos = 0, bad = 0; pos < text.size();) {
    const auto byte = static_cast<unsigned char>(text[pos]);
    if (byte == '\t') {
      out += "\\t";
      ++pos;
    } else if (byte < 0x20 || byte == 0x7F) {
      std::snprintf(escape, sizeof escape, "\\x%02X", byte);
      out += escape;
      ++pos;
    } else if (byte < 0x80) {
      out += static_cast<char>(byte);
      ++pos;
    } else if (const std::size_t length = valid_sequence_length(text, pos, bad); length == 0) {
      for (std::size_t i = 0; i < bad; ++i) {
        std::snprintf(escape, sizeof escape, "\\x%02X", static_cast<unsigned char>(text[pos + i]));
        out += escape;
      }
      pos += bad;
    } else {
      std::size_t decoded = 0;
      const char32_t c = decode_utf8_at(text, pos, decoded);
      if (invisible(c)) {
        std::snprintf(escape, sizeof escape, "\\u{%04X}", static_cast<unsigned>(c));
        out += escape;
      } else {
        out.append(text.substr(pos, length));
      }
      pos += length;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

}  // namespace pipelane
