// Token data in other frameworks' formats, written for the datasets tests: Megatron-LM MMIDIDX
// pairs and llm.c shards (formats: datasets/importers.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tests/datasets/test_files.h"

namespace pipelane::test_support {

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Megatron MMIDIDX with uint16 tokens, one sequence per document: PREFIX.idx and PREFIX.bin.
inline void write_megatron(const std::string& prefix, const std::vector<std::vector<std::uint16_t>>& docs) {
  std::string idx("MMIDIDX\0\0", 9), bin;
  put<std::uint64_t>(idx, 1);
  put<std::uint8_t>(idx, 8);
  put<std::uint64_t>(idx, docs.size());
  put<std::uint64_t>(idx, docs.size() + 1);
  for (const auto& d : docs) put<std::int32_t>(idx, static_cast<std::int32_t>(d.size()));
  std::int64_t pointer = 0;
  for (const auto& d : docs) {
    put<std::int64_t>(idx, pointer);
    pointer += static_cast<std::int64_t>(d.size() * 2);
    for (auto t : d) put(bin, t);
  }
  for (std::size_t i = 0; i <= docs.size(); ++i) put<std::int64_t>(idx, static_cast<std::int64_t>(i));
  write_file(prefix + ".idx", idx);
  write_file(prefix + ".bin", bin);
}

// llm.c shard bytes: version 1 holds uint16 GPT-2 tokens, version 2 uint32 LLaMA 3 tokens.
template <typename Token>
std::string llmc_shard(const std::vector<Token>& tokens, int version) {
  std::string out;
  std::int32_t header[256] = {};
  header[0] = 20240520;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(tokens.size());
  out.append(reinterpret_cast<const char*>(header), sizeof header);
  for (auto t : tokens) put(out, t);
  return out;
}

}  // namespace pipelane::test_support
