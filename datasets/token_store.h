// The token store: tokenized corpora in one HDF5 file, written once by `pipelane prepare-data` and
// read whole into memory by training. Format (version 1; later versions add, never rename):
//   root attributes  format = "pipelane-tokens", format_version = 1, tokenizer, vocab_size (uint32),
//                    sources (newline-joined input paths), checksum ("crc32:xxxxxxxx" over the
//                    train tokens, train doc_offsets, valid tokens, valid doc_offsets as little-endian
//                    uint32/uint64; added later within version 1, verified when present)
//   /train, /valid   tokens (uint16 when vocab_size <= 65536, else uint32), doc_offsets (uint64)
// Readers ignore objects they do not know, so a later version can add groups and attributes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/token_split.h"

namespace pipelane {

struct TokenStoreMeta {
  std::string tokenizer;
  std::uint32_t vocab_size = 0;
  std::vector<std::string> sources;
  std::string checksum;  // as read; "" for files written before checksums. Writers compute it.
};

inline constexpr const char* kTokenStoreFormat = "pipelane-tokens";
inline constexpr int kTokenStoreFormatVersion = 1;

// Writes the file under a temporary name in the same directory and renames it at the end, so a
// failure never leaves a file that looks complete. DataError on invalid splits or write failure.
void write_token_store(const std::string& path, const TokenStoreMeta& meta,
                       const TokenSplit& train, const TokenSplit& valid);

class TokenStore {
 public:
  // DataError: missing file, not HDF5, corrupt, wrong format/version, token id >= vocab_size,
  // checksum mismatch. Besides .h5 token stores it reads, by file name, Megatron-LM indexed
  // datasets (X.bin + X.idx; give either) and llm.c token shards (.bin with magic 20240520); see
  // datasets/importers.h for their formats and how a validation split is made for them. Defined
  // in token_file_dispatch.cpp, the one place that knows every format: this file reads HDF5 only.
  static TokenStore open(const std::string& path);
  // Builds a store from memory (importers); checks the splits like open() does.
  static TokenStore from_splits(TokenStoreMeta meta, TokenSplit train, TokenSplit valid,
                                const std::string& where);

  const TokenStoreMeta& meta() const { return meta_; }
  const TokenSplit& train() const { return train_; }
  const TokenSplit& valid() const { return valid_; }

 private:
  TokenStore() = default;
  static TokenStore open_hdf5(const std::string& path);
  TokenStoreMeta meta_;
  TokenSplit train_;
  TokenSplit valid_;
};

}  // namespace pipelane
