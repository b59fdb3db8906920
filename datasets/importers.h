// Token data prepared by other frameworks, read as-is:
// - Megatron-LM indexed dataset (MMIDIDX): PREFIX.idx + PREFIX.bin. The .idx holds the magic
//   "MMIDIDX\0\0", version (u64 = 1), dtype code (u8: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16),
//   sequence count (u64), document count (u64), then int32 sequence lengths, int64 byte pointers
//   into .bin, int64 document indices. Each sequence is one document.
// - llm.c token shard: a 256 x int32 header (magic 20240520, version 1 = GPT-2 uint16 tokens or
//   2 = uint32 tokens, token count) then the tokens; every document starts with <|endoftext|>.
// Neither format records a tokenizer or a validation split: llm.c v1 is GPT-2 by definition;
// Megatron files are taken as GPT-2 (every id must be < 50257). Read through TokenStore::open,
// documents are held out for validation with the same evenly spaced rule as prepare-data, at
// kImportValidFraction; `pipelane prepare-data --input X.bin` converts with any --valid-fraction.
#pragma once
#include <string>

#include "datasets/token_store.h"

namespace pipelane {

inline constexpr double kImportValidFraction = 0.05;
inline constexpr std::uint32_t kLlmcMagic = 20240520;

// Document i is held out iff floor((i+1)*f) > floor(i*f): exactly floor(n*f) documents, evenly
// spaced, the same every run.
bool is_held_out_document(std::size_t index, double valid_fraction);

// True when `path` names a Megatron (.idx, or .bin with a sibling .idx) or llm.c (.bin) file.
bool is_imported_format(const std::string& path);

struct ImportedTokens {
  TokenStoreMeta meta;
  TokenSplit all;  // every document, in file order
};

// DataError naming the file and byte offset: missing or truncated files, bad magic/version/dtype,
// inconsistent offsets, ids outside the vocabulary.
ImportedTokens read_megatron_dataset(const std::string& path);
ImportedTokens read_llmc_shard(const std::string& path);
ImportedTokens read_imported(const std::string& path);  // by name, as is_imported_format

// Splits documents into train/valid with is_held_out_document.
void split_documents_by_fraction(const TokenSplit& all, double valid_fraction, TokenSplit& train,
                                 TokenSplit& valid);

// read_imported + split at kImportValidFraction.
TokenStore import_token_file(const std::string& path);

}  // namespace pipelane
