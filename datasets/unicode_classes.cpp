#include "datasets/unicode_classes.h"

#include <algorithm>
#include <iterator>

namespace pipelane {
namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "datasets/unicode_classes.inc"

template <std::size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t c) {
  // First range whose end is >= c; c is in the class iff that range also starts at or before c.
  const auto* it = std::lower_bound(std::begin(ranges), std::end(ranges), c,
                                    [](const CodePointRange& r, char32_t v) { return r.last < v; });
  return it != std::end(ranges) && it->first <= c;
}

}  // namespace

bool is_unicode_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return in_ranges(kLetterRanges, c);
}

bool is_unicode_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(kNumberRanges, c);
}

bool is_unicode_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0d);
  return in_ranges(kSpaceRanges, c);
}

bool is_unicode_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0d);
  return in_ranges(kWhiteSpaceRanges, c);
}

bool is_unicode_upper_or_caseless(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z';
  return in_ranges(kUpperOrCaselessRanges, c);
}

bool is_unicode_lower_or_caseless(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z';
  return in_ranges(kLowerOrCaselessRanges, c);
}

}  // namespace pipelane
