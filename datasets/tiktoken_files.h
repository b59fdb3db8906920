// Tokenizers from tiktoken rank files: lines "base64(token bytes) rank", the rank being the id
// (OpenAI's cl100k_base.tiktoken and o200k_base.tiktoken; Meta's Llama 3 tokenizer.model is one
// too). The file holds only the mergeable tokens; each family adds its pre-tokenization pattern
// and its special tokens, as tiktoken's openai_public.py and Meta's tokenizer.py do.
// scripts/fetch_tokenizers.sh puts the three files in default_tokenizer_dir().
#pragma once
#include <string>

#include "datasets/bpe_tokenizer.h"

namespace pipelane {

enum class TiktokenFamily {
  kCl100k,  // pattern cl100k; <|endoftext|> 100257, <|fim_prefix|>.., <|endofprompt|> 100276
  kO200k,   // pattern o200k; <|endoftext|> 199999, <|endofprompt|> 200018
  kLlama3,  // pattern cl100k; 256 special tokens from 128000 (<|begin_of_text|>, <|end_of_text|>,
            // <|start_header_id|>, <|eot_id|>, ...; Llama 3.1's names)
};

// `name` is the tokenizer's name ("cl100k"); DataError naming the file and line when it is
// missing or malformed (bad base64, ranks not 0, 1, 2, ... in order, a byte without its token).
BpeTokenizer load_tiktoken_file(const std::string& path, TiktokenFamily family, const std::string& name);

// The rank file of a family in `directory` (cl100k_base.tiktoken, o200k_base.tiktoken, llama3.tiktoken).
std::string tiktoken_file_name(TiktokenFamily family);

// ${PIPELANE_TOKENIZERS_DIR} if set, else ${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/tokenizers.
std::string default_tokenizer_dir();

}  // namespace pipelane
