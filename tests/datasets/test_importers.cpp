#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "datasets/data_error.h"
#include "datasets/importers.h"
#include "datasets/token_store.h"
#include "tests/datasets/test_files.h"
#include "tests/datasets/token_data_files.h"

namespace pipelane {
namespace {

using test_support::write_megatron;

std::string llmc_shard(const std::vector<std::uint16_t>& tokens) { return test_support::llmc_shard(tokens, 1); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Importers, ReadsMegatronIndexedDataset) {
  test_support::TempDir dir;
  std::vector<std::vector<std::uint16_t>> docs;
  for (int d = 0; d < 40; ++d) docs.push_back(std::vector<std::uint16_t>(5 + d, static_cast<std::uint16_t>(d + 50000)));
  write_megatron(dir.file("corpus"), docs);
  const ImportedTokens t = read_megatron_dataset(dir.file("corpus.bin"));
  ASSERT_EQ(t.all.doc_offsets.size(), 41u);
  EXPECT_EQ(t.all.tokens[5], 50001u);
  EXPECT_EQ(t.meta.tokenizer, "gpt2");
  const TokenStore store = TokenStore::open(dir.file("corpus.idx"));  // read directly
  EXPECT_EQ(store.train().doc_offsets.size() - 1 + store.valid().doc_offsets.size() - 1, 40u);
  EXPECT_EQ(store.valid().doc_offsets.size() - 1, 2u);  // 5% of 40
}

TEST(Importers, MegatronErrorsNameFileAndProblem) {
  test_support::TempDir dir;
  write_megatron(dir.file("c"), {{1, 2, 3}, {4, 5}});
  // Truncated .bin
  test_support::write_file(dir.file("c.bin"), std::string(6, '\0'));
  EXPECT_NE(error_of([&] { read_megatron_dataset(dir.file("c.bin")); }).find("c.bin: truncated"), std::string::npos);
  // Truncated .idx
  write_megatron(dir.file("d"), {{1, 2, 3}, {4, 5}});
  std::string idx;
  { std::ifstream in(dir.file("d.idx"), std::ios::binary); idx.assign(std::istreambuf_iterator<char>(in), {}); }
  test_support::write_file(dir.file("d.idx"), idx.substr(0, idx.size() - 4));
  EXPECT_NE(error_of([&] { read_megatron_dataset(dir.file("d.idx")); }).find("d.idx: truncated"), std::string::npos);
  // Bad magic
  test_support::write_file(dir.file("d.idx"), "NOTMEGATRON" + idx);
  EXPECT_NE(error_of([&] { read_megatron_dataset(dir.file("d.idx")); }).find("MMIDIDX"), std::string::npos);
  // Ids outside GPT-2's vocabulary
  write_megatron(dir.file("e"), {{1, 60000}});
  EXPECT_NE(error_of([&] { read_megatron_dataset(dir.file("e.bin")); }).find("token id 60000"), std::string::npos);
}

TEST(Importers, ReadsLlmcShardSplittingAtEndOfText) {
  test_support::TempDir dir;
  test_support::write_file(dir.file("shard.bin"), llmc_shard({50256, 10, 11, 50256, 12, 50256, 13, 14, 15}));
  const ImportedTokens t = read_llmc_shard(dir.file("shard.bin"));
  EXPECT_EQ(t.all.doc_offsets, (std::vector<std::uint64_t>{0, 3, 5, 9}));
  EXPECT_EQ(t.meta.vocab_size, 50257u);
  EXPECT_NO_THROW(TokenStore::open(dir.file("shard.bin")));
}

TEST(Importers, LlmcErrors) {
  test_support::TempDir dir;
  std::string shard = llmc_shard({50256, 1, 2, 3});
  test_support::write_file(dir.file("cut.bin"), shard.substr(0, shard.size() - 2));
  EXPECT_NE(error_of([&] { read_llmc_shard(dir.file("cut.bin")); }).find("truncated"), std::string::npos);
  shard[0] = 'X';
  test_support::write_file(dir.file("magic.bin"), shard);
  EXPECT_NE(error_of([&] { read_llmc_shard(dir.file("magic.bin")); }).find("expected 20240520"), std::string::npos);
  test_support::write_file(dir.file("tiny.bin"), "abc");
  EXPECT_NE(error_of([&] { read_llmc_shard(dir.file("tiny.bin")); }).find("truncated at byte 0"), std::string::npos);
  EXPECT_NE(error_of([&] { TokenStore::open(dir.file("missing.bin")); }).find("no such file"), std::string::npos);
}

TEST(TokenStoreChecksum, DetectsChangedTokens) {
  test_support::TempDir dir;
  const TokenSplit train{{1, 2, 3, 4}, {0, 2, 4}}, valid{{5}, {0, 1}};
  write_token_store(dir.file("t.h5"), {"byte", 256, {"x"}, ""}, train, valid);
  const TokenStore store = TokenStore::open(dir.file("t.h5"));
  EXPECT_EQ(store.meta().checksum, token_store_checksum(train, valid));
  EXPECT_NE(token_store_checksum(train, valid), token_store_checksum(valid, train));
}

}  // namespace
}  // namespace pipelane
