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

namespace pipelane {

struct TokenSplit {                        // one split held in memory
  std::vector<std::uint32_t> tokens;       // all documents concatenated
  std::vector<std::uint64_t> doc_offsets;  // n_docs + 1 entries, doc_offsets[0] = 0
};

struct TokenStoreMeta {
  std::string tokenizer;
  std::uint32_t vocab_size = 0;
  std::vector<std::string> sources;
  std::string checksum;  // as read; "" for files written before checksums. Writers compute it.
};

inline constexpr const char* kTokenStoreFormat = "pipelane-tokens";
inline constexpr int kTokenStoreFormatVersion = 1;

// DataError (naming `where`) unless doc_offsets starts at 0, never decreases, ends at
// tokens.size(), and every token is < vocab_size.
void check_token_split(const TokenSplit& split, std::uint32_t vocab_size, const std::string& where);

// Writes the file under a temporary name in the same directory and renames it at the end, so a
// failure never leaves a file that looks complete. DataError on invalid splits or write failure.
void write_token_store(const std::string& path, const TokenStoreMeta& meta,
                       const TokenSplit& train, const TokenSplit& valid);

// "crc32:xxxxxxxx" of the two splits, as stored in the checksum attribute.
std::string token_store_checksum(const TokenSplit& train, const TokenSplit& valid);

class TokenStore {
 public:
  // DataError: missing file, not HDF5, corrupt, wrong format/version, token id >= vocab_size,
  // checksum mismatch. Besides .h5 token stores it reads, by file name, Megatron-LM indexed
  // datasets (X.bin + X.idx; give either) and llm.c token shards (.bin with magic 20240520); see
  // datasets/importers.h for their formats and how a validation split is made for them.
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
