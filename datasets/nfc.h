// Unicode Normalization Form C, for tokenizers whose tokenizer.json asks for it (Qwen2's). Through
// ICU (libicu-dev): its tables are Unicode 15 (Debian 12's ICU 72), so a character assigned later
// with a canonical decomposition (a few Unicode 16 scripts) stays as written.
#pragma once
#include <string>
#include <string_view>

namespace pipelane {

// `text` (valid UTF-8) in NFC, appended to `out`; copies it unchanged when it already is NFC.
void append_nfc(std::string_view text, std::string& out);

}  // namespace pipelane
