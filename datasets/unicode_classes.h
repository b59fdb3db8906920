// Character classes of the GPT-2 pre-tokeniser regex (\p{L}, \p{N}, \s), taken from node's regex
// engine so our splits equal those of the npm `gpt-3-encoder` package the tests compare against.
#pragma once
#include <cstdint>

namespace pipelane {

bool is_unicode_letter(char32_t c);      // \p{L}
bool is_unicode_number(char32_t c);      // \p{N}
bool is_unicode_whitespace(char32_t c);  // JavaScript \s (differs from Python's str.isspace)

}  // namespace pipelane
