// Hand-written matchers for the pre-tokenization regexes of tiktoken's cl100k_base and o200k_base,
// which Llama 3 (cl100k's) and Qwen2 (cl100k's with single digits) reuse. At each position the
// alternatives are tried in the regex's order, each as the backtracking engine would match it, and
// the first that matches wins: the pieces are the regex's matches. \s is Unicode White_Space, as in
// the Rust engines (fancy-regex, Oniguruma) these patterns were written for; the contractions are
// ASCII case-insensitive.
#pragma once
#include <string_view>

#include "datasets/unicode_classes.h"
#include "datasets/utf8.h"

namespace pipelane {
namespace tiktoken_detail {

inline bool is_newline(char32_t c) { return c == U'\r' || c == U'\n'; }
inline bool is_letter_or_number(char32_t c) { return is_unicode_letter(c) || is_unicode_number(c); }
// [^\s\p{L}\p{N}]
inline bool is_symbol(char32_t c) { return !is_unicode_white_space(c) && !is_letter_or_number(c); }
// [^\r\n\p{L}\p{N}]: the one optional character before a word.
inline bool is_word_prefix(char32_t c) { return !is_newline(c) && !is_letter_or_number(c); }

inline char32_t at(std::string_view text, std::size_t pos, std::size_t& length) {
  return decode_utf8_at(text, pos, length);
}

// End of the run of characters satisfying `in` from `pos`.
template <typename Class>
std::size_t run_end(std::string_view text, std::size_t pos, Class in) {
  std::size_t len = 0;
  while (pos < text.size() && in(at(text, pos, len))) pos += len;
  return pos;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at pos: its length, or 0.
inline std::size_t contraction_length(std::string_view text, std::size_t pos) {
  if (pos + 1 >= text.size() || text[pos] != '\'') return 0;
  const char a = static_cast<char>(text[pos + 1] | 0x20);  // ASCII lower case (others never match)
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char b = static_cast<char>(text[pos + 2] | 0x20);
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

// Length of \p{N}{1,max_digits} at pos (pos holds a number).
inline std::size_t digits_end(std::string_view text, std::size_t pos, int max_digits) {
  std::size_t len = 0;
  for (int n = 0; n < max_digits && pos < text.size() && is_unicode_number(at(text, pos, len)); ++n) pos += len;
  return pos;
}

// The whitespace alternatives, at pos holding whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+.
inline std::size_t whitespace_end(std::string_view text, std::size_t pos) {
  std::size_t end = pos, last_start = pos, len = 0;
  std::size_t after_last_newline = 0;  // 0: no \r or \n in the run
  while (end < text.size()) {
    const char32_t c = at(text, end, len);
    if (!is_unicode_white_space(c)) break;
    last_start = end;
    end += len;
    if (is_newline(c)) after_last_newline = end;
  }
  // \s* backtracks to the last line break of the run; [\r\n]+ then takes it (nothing after it in
  // the run is a line break).
  if (after_last_newline != 0) return after_last_newline;
  // \s+(?!\S): the run, less its last character when text follows, unless that leaves nothing.
  if (end < text.size() && last_start > pos) return last_start;
  return end;  // the whole run: at the end of text, or \s+ of one character
}

// ` ?[^\s\p{L}\p{N}]+` then `[\r\n]*` (o200k: `[\r\n/]*`) at pos, or pos when it does not match.
inline std::size_t symbols_end(std::string_view text, std::size_t pos, bool slash_trails) {
  std::size_t len = 0, start = pos;
  if (text[pos] == ' ' && pos + 1 < text.size()) start = pos + 1;
  if (!is_symbol(at(text, start, len))) {
    if (start == pos) return pos;
    start = pos;  // " ?" matches nothing, and ' ' is no symbol
    if (!is_symbol(at(text, start, len))) return pos;
  }
  const std::size_t end = run_end(text, start, is_symbol);
  return run_end(text, end, [&](char32_t c) { return is_newline(c) || (slash_trails && c == U'/'); });
}

// cl100k at pos: the end of the piece that starts there.
inline std::size_t cl100k_piece_end(std::string_view text, std::size_t pos, int max_digits) {
  if (const std::size_t c = contraction_length(text, pos)) return pos + c;
  std::size_t len = 0, next_len = 0;
  const char32_t first = at(text, pos, len);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (is_unicode_letter(first)) return run_end(text, pos, is_unicode_letter);
  if (is_word_prefix(first) && pos + len < text.size() && is_unicode_letter(at(text, pos + len, next_len)))
    return run_end(text, pos + len, is_unicode_letter);
  if (is_unicode_number(first)) return digits_end(text, pos, max_digits);
  if (const std::size_t end = symbols_end(text, pos, false); end != pos) return end;
  return whitespace_end(text, pos);  // what is left: whitespace
}

// o200k's word alternatives from `start`:
//   head_first: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+   (upper* then lower+)
//   otherwise:  [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*   (upper+ then lower*)
// each followed by an optional contraction. Returns the end, or npos when it does not match.
inline std::size_t o200k_word_end(std::string_view text, std::size_t start, bool lower_required) {
  constexpr std::size_t kNoMatch = std::string_view::npos;
  if (start >= text.size()) return kNoMatch;
  const std::size_t upper_end = run_end(text, start, is_unicode_upper_or_caseless);
  std::size_t end = kNoMatch, len = 0;
  if (!lower_required) {
    if (upper_end == start) return kNoMatch;
    end = run_end(text, upper_end, is_unicode_lower_or_caseless);
  } else if (upper_end < text.size() && is_unicode_lower_or_caseless(at(text, upper_end, len))) {
    end = run_end(text, upper_end, is_unicode_lower_or_caseless);
  } else {
    // The upper run gives back characters until one of them is also a lower one (Lm, Lo, M); the
    // lower run is then that character alone (the one after it did not match).
    for (std::size_t p = start; p < upper_end; p += len)
      if (is_unicode_lower_or_caseless(at(text, p, len))) end = p + len;
    if (end == kNoMatch) return kNoMatch;
  }
  return end + contraction_length(text, end);
}

// o200k at pos: the end of the piece that starts there.
inline std::size_t o200k_piece_end(std::string_view text, std::size_t pos) {
  constexpr std::size_t kNoMatch = std::string_view::npos;
  std::size_t len = 0;
  const char32_t first = at(text, pos, len);
  const bool prefix = is_word_prefix(first);
  for (const bool lower_required : {true, false}) {
    if (prefix)
      if (const std::size_t end = o200k_word_end(text, pos + len, lower_required); end != kNoMatch) return end;
    if (const std::size_t end = o200k_word_end(text, pos, lower_required); end != kNoMatch) return end;
  }
  if (is_unicode_number(first)) return digits_end(text, pos, 3);
  if (const std::size_t end = symbols_end(text, pos, true); end != pos) return end;
  return whitespace_end(text, pos);
}

}  // namespace tiktoken_detail

// Calls emit(piece) for each pre-token of valid UTF-8 `text`; the pieces tile it.
//   cl100k (max_digits 3; Qwen2: 1):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <typename Emit>
void cl100k_pretokenize(std::string_view text, int max_digits, Emit&& emit) {
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = tiktoken_detail::cl100k_piece_end(text, pos, max_digits);
    emit(text.substr(pos, end - pos));
    pos = end;
  }
}

//   o200k: [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//         |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//         |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <typename Emit>
void o200k_pretokenize(std::string_view text, Emit&& emit) {
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = tiktoken_detail::o200k_piece_end(text, pos);
    emit(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace pipelane
