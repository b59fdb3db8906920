// UTF-8 checking and repair before tokenisation. Byte-level BPE could encode any bytes, but the
// reference encoder (node) decodes text first, turning each invalid sequence into U+FFFD; doing the
// same (or refusing the text) keeps our ids equal to the reference and the corpus honest.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pipelane {

enum class InvalidUtf8 {
  kReplace,  // each maximal invalid subpart becomes U+FFFD (the WHATWG decoder's rule, as node)
  kFail,     // DataError naming the byte offset
};

// "replace" or "fail"; DataError otherwise.
InvalidUtf8 parse_invalid_utf8(std::string_view name);

// Offset of the first invalid byte, or npos when `text` is valid UTF-8.
std::size_t find_invalid_utf8(std::string_view text);

// `text` made valid. kFail: DataError "<where>: invalid UTF-8 at byte N ..." where N counts from
// `offset` (the position of `text` in its file). `replaced` (optional) receives the number of
// U+FFFD inserted.
std::string repair_utf8(std::string_view text, InvalidUtf8 policy, const std::string& where,
                        std::size_t* replaced = nullptr, std::uint64_t offset = 0);

// `text` as it may appear inside a one-line message: control characters, DEL and bytes that are
// not UTF-8 become \xNN (a tab \t), invisible or line-breaking code points (C1 controls, zero-width
// and direction marks, U+2028/9, a byte order mark) become \u{XXXX}; printable text, non-ASCII
// letters included, is unchanged. What a file or a user wrote is echoed through it.
std::string printable(std::string_view text);

// Appends the UTF-8 of code point `c` (< 0x110000).
void append_utf8(std::string& out, char32_t c);

// Decodes the code point at text[pos] of valid UTF-8; sets `length` to its byte count.
inline char32_t decode_utf8_at(std::string_view text, std::size_t pos, std::size_t& length) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) { length = 1; return b0; }
  auto cont = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + k]) & 0x3f); };
  if (b0 < 0xe0) { length = 2; return (static_cast<char32_t>(b0 & 0x1f) << 6) | cont(1); }
  if (b0 < 0xf0) { length = 3; return (static_cast<char32_t>(b0 & 0x0f) << 12) | (cont(1) << 6) | cont(2); }
  length = 4;
  return (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

}  // namespace pipelane
