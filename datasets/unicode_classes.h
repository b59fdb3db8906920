// Character classes of the pre-tokeniser regexes (\p{L}, \p{N}, \s, o200k's cased classes,
// White_Space), taken from node's regex engine so our splits equal those of the npm packages the
// tests compare against.
#pragma once
#include <cstdint>

namespace pipelane {

bool is_unicode_letter(char32_t c);      // \p{L}
bool is_unicode_number(char32_t c);      // \p{N}
bool is_unicode_whitespace(char32_t c);  // JavaScript \s (differs from Python's str.isspace)
// The \s of the Rust engines tiktoken and Hugging Face tokenizers run (Unicode White_Space): JS \s
// without U+FEFF, plus U+0085.
bool is_unicode_white_space(char32_t c);
bool is_unicode_upper_or_caseless(char32_t c);  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
bool is_unicode_lower_or_caseless(char32_t c);  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]

}  // namespace pipelane
