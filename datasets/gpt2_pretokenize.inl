// gpt2_pretokenize: a hand-written matcher for GPT-2's regex. Alternatives are tried in the
// regex's order at each position, so the first that matches wins, exactly like the regex engine.
#pragma once
#include "datasets/unicode_classes.h"
#include "datasets/utf8.h"

namespace pipelane {
namespace gpt2_detail {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

inline CharClass classify(char32_t c) {
  if (is_unicode_letter(c)) return CharClass::kLetter;
  if (is_unicode_number(c)) return CharClass::kNumber;
  if (is_unicode_whitespace(c)) return CharClass::kSpace;
  return CharClass::kOther;
}

// End of the run of characters of class `cls` starting at `pos`.
inline std::size_t run_end(std::string_view text, std::size_t pos, CharClass cls) {
  std::size_t len = 0;
  while (pos < text.size() && classify(decode_utf8_at(text, pos, len)) == cls) pos += len;
  return pos;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd; lowercase only, as in GPT-2) at pos, or 0.
inline std::size_t contraction_length(std::string_view text, std::size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 < text.size()) {
    const char b = text[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

}  // namespace gpt2_detail

template <typename Emit>
void gpt2_pretokenize(std::string_view text, Emit&& emit) {
  using gpt2_detail::CharClass;
  std::size_t pos = 0, len = 0;
  while (pos < text.size()) {
    if (const std::size_t c = gpt2_detail::contraction_length(text, pos)) {
      emit(text.substr(pos, c));
      pos += c;
      continue;
    }
    const char32_t first = decode_utf8_at(text, pos, len);
    CharClass cls = gpt2_detail::classify(first);
    std::size_t body = pos;  // where the letter/number/other run starts
    if (first == U' ' && pos + 1 < text.size()) {
      // " ?X+": an optional single ASCII space joins the following run unless that is whitespace.
      std::size_t next_len = 0;
      const CharClass next = gpt2_detail::classify(decode_utf8_at(text, pos + 1, next_len));
      if (next != CharClass::kSpace) {
        cls = next;
        body = pos + 1;
      }
    }
    if (cls != CharClass::kSpace) {
      const std::size_t end = gpt2_detail::run_end(text, body, cls);
      emit(text.substr(pos, end - pos));
      pos = end;
      continue;
    }
    // "\s+(?!\S)" then "\s+": a whitespace run followed by text leaves its last character to prefix
    // the next piece, unless the run is a single character.
    std::size_t end = pos, last_start = pos;
    while (end < text.size()) {
      std::size_t l = 0;
      if (!is_unicode_whitespace(decode_utf8_at(text, end, l))) break;
      last_start = end;
      end += l;
    }
    if (end < text.size() && last_start > pos) end = last_start;
    emit(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace pipelane
