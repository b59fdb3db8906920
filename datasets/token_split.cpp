#include "datasets/token_split.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <type_traits>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

static_assert(std::is_same_v<uLong, unsigned long>, "TokenChecksum keeps zlib's uLong as unsigned long");

// CRC-32 of values as little-endian words of `bytes` bytes, the same on every host.
template <typename T>
uLong crc_little_endian(uLong crc, std::span<const T> values, int bytes) {
  if constexpr (std::endian::native == std::endian::little && sizeof(T) <= 8) {
    if (static_cast<std::size_t>(bytes) == sizeof(T)) {
      const auto* data = reinterpret_cast<const unsigned char*>(values.data());
      std::size_t left = values.size_bytes();
      while (left > 0) {  // crc32 takes at most 4 GiB at a time
        const auto n = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
        crc = crc32(crc, data, n);
        data += n;
        left -= n;
      }
      return crc;
    }
  }
  unsigned char buffer[8 * 1024];
  std::size_t used = 0;
  for (const T value : values) {
    if (used + 8 > sizeof buffer) {
      crc = crc32(crc, buffer, static_cast<uInt>(used));
      used = 0;
    }
    for (int i = 0; i < bytes; ++i)
      buffer[used++] = static_cast<unsigned char>(static_cast<std::uint64_t>(value) >> (8 * i));
  }
  return crc32(crc, buffer, static_cast<uInt>(used));
}

}  // namespace

std::size_t first_out_of_vocab(std::span<const std::uint32_t> tokens, std::uint32_t vocab_size) {
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [vocab_size](std::uint32_t t) { return t >= vocab_size; });
  return static_cast<std::size_t>(bad - tokens.begin());
}

void check_token_split(const TokenSplit& split, std::uint32_t vocab_size, const std::string& where) {
  const auto& offsets = split.doc_offsets;
  if (offsets.empty() || offsets.front() != 0)
    throw DataError(where + ": doc_offsets must start with 0 (n_docs + 1 entries)");
  if (!std::is_sorted(offsets.begin(), offsets.end()))
    throw DataError(where + ": doc_offsets must never decrease");
  if (offsets.back() != split.tokens.size())
    throw DataError(where + ": doc_offsets ends at " + std::to_string(offsets.back()) +
                    ", expected the token count " + std::to_string(split.tokens.size()));
  const std::size_t bad = first_out_of_vocab(split.tokens, vocab_size);
  if (bad != split.tokens.size())
    throw DataError(where + ": token id " + std::to_string(split.tokens[bad]) + " at position " +
                    std::to_string(bad) + " is >= vocab_size " + std::to_string(vocab_size));
}

TokenChecksum::TokenChecksum() {
  for (Part& part : parts_) part.crc = crc32(0L, Z_NULL, 0);
}

void TokenChecksum::add_tokens(int split, std::span<const std::uint32_t> tokens) {
  parts_[2 * split].crc = crc_little_endian(parts_[2 * split].crc, tokens, 4);
  parts_[2 * split].bytes += 4 * tokens.size();
}

void TokenChecksum::add_offsets(int split, std::span<const std::uint64_t> offsets) {
  parts_[2 * split + 1].crc = crc_little_endian(parts_[2 * split + 1].crc, offsets, 8);
  parts_[2 * split + 1].bytes += 8 * offsets.size();
}

std::string TokenChecksum::text() const {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const Part& part : parts_) crc = crc32_combine(crc, part.crc, static_cast<z_off_t>(part.bytes));
  char text[24];
  std::snprintf(text, sizeof text, "crc32:%08lx", static_cast<unsigned long>(crc));
  return text;
}

std::string token_store_checksum(const TokenSplit& train, const TokenSplit& valid) {
  TokenChecksum checksum;
  checksum.add_tokens(0, train.tokens);
  checksum.add_offsets(0, train.doc_offsets);
  checksum.add_tokens(1, valid.tokens);
  checksum.add_offsets(1, valid.doc_offsets);
  return checksum.text();
}

}  // namespace pipelane
