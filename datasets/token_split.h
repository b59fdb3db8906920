// A token split (documents of token ids, as the token store holds them) and what every reader
// and writer of one checks: its shape and vocabulary (check_token_split, first_out_of_vocab) and
// its checksum (TokenChecksum, token_store_checksum: the store's "checksum" attribute). One
// place, so the reader verifies exactly what the writer computed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pipelane {

struct TokenSplit {                        // one split held in memory
  std::vector<std::uint32_t> tokens;       // all documents concatenated
  std::vector<std::uint64_t> doc_offsets;  // n_docs + 1 entries, doc_offsets[0] = 0
};

// The position of the first id >= vocab_size in `tokens`; tokens.size() when there is none.
std::size_t first_out_of_vocab(std::span<const std::uint32_t> tokens, std::uint32_t vocab_size);

// DataError (naming `where`) unless doc_offsets starts at 0, never decreases, ends at
// tokens.size(), and every token is < vocab_size.
void check_token_split(const TokenSplit& split, std::uint32_t vocab_size, const std::string& where);

// The checksum attribute: CRC-32 over train tokens, train doc_offsets, valid tokens, valid
// doc_offsets (little-endian uint32/uint64), in that order, kept as four running CRCs and
// combined at the end, so the four streams can grow in any interleaving (the writer appends a
// document at a time).
class TokenChecksum {
 public:
  TokenChecksum();
  void add_tokens(int split, std::span<const std::uint32_t> tokens);  // split 0: train, 1: valid
  void add_offsets(int split, std::span<const std::uint64_t> offsets);
  std::string text() const;  // "crc32:xxxxxxxx"

 private:
  struct Part {
    unsigned long crc = 0;
    std::uint64_t bytes = 0;
  };
  Part parts_[4];
};

// "crc32:xxxxxxxx" of the two splits, as stored in the checksum attribute.
std::string token_store_checksum(const TokenSplit& train, const TokenSplit& valid);

}  // namespace pipelane
