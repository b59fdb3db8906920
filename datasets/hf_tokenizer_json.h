// Hugging Face tokenizer.json files of byte-level BPE (Llama 3, Qwen2, GPT-2, and others that use
// one of their pre-tokenizers), read directly: model.vocab and model.merges (spelled in GPT-2's
// byte alphabet; merges as "a b" strings or [a, b] pairs), model.ignore_merges, the normalizer
// (none or NFC), the pre-tokenizer (ByteLevel with GPT-2's regex, or a Split on one of the regexes
// bpe_tokenizer.h matches by hand followed by ByteLevel without regex) and added_tokens.
// The post-processor is not applied: prepare-data ends each document with the end-of-text token
// instead of adding a beginning-of-text token (the first of <|end_of_text|>, <|endoftext|> that the
// file has; none: documents get no separator). Anything else is refused with one line naming the
// file and the key.
#pragma once
#include <string>

#include "datasets/bpe_tokenizer.h"

namespace pipelane {

// `name` is the tokenizer's name ("hf:PATH").
BpeTokenizer load_hf_tokenizer_json(const std::string& path, const std::string& name);

}  // namespace pipelane
