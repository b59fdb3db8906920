#include <gtest/gtest.h>
#include <hdf5.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "datasets/data_error.h"
#include "datasets/token_store.h"
#include "datasets/token_store_writer.h"
#include "tests/datasets/test_files.h"

namespace pipelane {
namespace {

using test_support::TempDir;

TokenStoreMeta byte_meta() { return {"byte", 256, {"corpus/a.txt", "corpus/b.txt.gz"}}; }

TokenSplit make_split(std::vector<std::uint32_t> tokens, std::vector<std::uint64_t> offsets) {
  return TokenSplit{std::move(tokens), std::move(offsets)};
}

// Patches one root attribute in place, to build files the writer itself refuses to produce.
void replace_root_attribute(const std::string& path, const char* name, hid_t type, const void* value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Adelete(file, name), 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attribute, 0);
  ASSERT_GE(H5Awrite(attribute, type, value), 0);
  H5Aclose(attribute);
  H5Sclose(space);
  ASSERT_GE(H5Fclose(file), 0);
}

void replace_string_attribute(const std::string& path, const char* name, const std::string& value) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());  // fixed-length this time: the reader must accept both kinds
  replace_root_attribute(path, name, type, value.data());
  H5Tclose(type);
}

std::size_t token_dataset_width(const std::string& path) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dataset = H5Dopen2(file, "/train/tokens", H5P_DEFAULT);
  const hid_t type = H5Dget_type(dataset);
  const std::size_t width = H5Tget_size(type);
  H5Tclose(type);
  H5Dclose(dataset);
  H5Fclose(file);
  return width;
}

// The DataError message from opening `path`, checked to be exactly one line.
std::string open_error(const std::string& path) {
  try {
    TokenStore::open(path);
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind(path, 0), 0u) << "message should start with the path: " << message;
    return message;
  }
  ADD_FAILURE() << "expected DataError opening " << path;
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TokenStore, WriteReadRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("store.h5");
  const TokenSplit train = make_split({0, 255, 7, 7, 1, 128, 42}, {0, 3, 3, 7});  // incl. empty doc
  const TokenSplit valid = make_split({9, 8, 200}, {0, 1, 3});
  write_token_store(path, byte_meta(), train, valid);

  const TokenStore store = TokenStore::open(path);
  EXPECT_EQ(store.meta().tokenizer, "byte");
  EXPECT_EQ(store.meta().vocab_size, 256u);
  EXPECT_EQ(store.meta().sources, byte_meta().sources);
  EXPECT_EQ(store.train().tokens, train.tokens);
  EXPECT_EQ(store.train().doc_offsets, train.doc_offsets);
  EXPECT_EQ(store.valid().tokens, valid.tokens);
  EXPECT_EQ(store.valid().doc_offsets, valid.doc_offsets);
  EXPECT_EQ(token_dataset_width(path), 2u);  // byte vocab fits uint16

  // Only the finished file is left: the temporary name was renamed away.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST(TokenStore, LargeVocabularyUsesUint32AndEmptyValidSplitSurvives) {
  TempDir dir;
  const std::string path = dir.file("big_vocab.h5");
  const TokenSplit train = make_split({69999, 0, 65536, 123456}, {0, 4});
  write_token_store(path, {"bpe", 200000, {}}, train, make_split({}, {0}));
  const TokenStore store = TokenStore::open(path);
  EXPECT_EQ(store.train().tokens, train.tokens);
  EXPECT_TRUE(store.valid().tokens.empty());
  EXPECT_EQ(store.valid().doc_offsets, (std::vector<std::uint64_t>{0}));
  EXPECT_TRUE(store.meta().sources.empty());
  EXPECT_EQ(token_dataset_width(path), 4u);
}

TEST(TokenStore, WriterRejectsInconsistentSplitsAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("bad.h5");
  EXPECT_THROW(write_token_store(path, byte_meta(), make_split({1, 2, 3}, {0, 2}), make_split({}, {0})),
               DataError);
  EXPECT_THROW(write_token_store(path, byte_meta(), make_split({1, 256}, {0, 2}), make_split({}, {0})),
               DataError);
  EXPECT_THROW(write_token_store(dir.file("no/such/dir/x.h5"), byte_meta(), make_split({1}, {0, 1}),
                                 make_split({}, {0})),
               DataError);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(TokenStore, MissingFileSaysToRunPrepareData) {
  TempDir dir;
  const std::string message = open_error(dir.file("x.h5"));
  EXPECT_TRUE(contains(message, "no such file (run 'pipelane prepare-data' first)")) << message;
}

TEST(TokenStore, GarbageFileIsOneClearLineWithoutHdf5Noise) {
  TempDir dir;
  const std::string path = dir.file("garbage.h5");
  std::mt19937 generator(7);
  std::string bytes(4096, '\0');
  for (char& b : bytes) b = static_cast<char>(generator() & 0xFF);
  test_support::write_file(path, bytes);

  ::testing::internal::CaptureStderr();
  const std::string message = open_error(path);
  const std::string hdf5_noise = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(message, "not a readable HDF5 token file (truncated or corrupt")) << message;
  EXPECT_EQ(hdf5_noise, "");
}

TEST(TokenStore, TruncatedFileIsReportedAsCorrupt) {
  TempDir dir;
  const std::string path = dir.file("truncated.h5");
  std::vector<std::uint32_t> tokens(200000);
  std::mt19937 generator(3);
  for (auto& t : tokens) t = generator() % 256;  // incompressible, so the file is large
  write_token_store(path, byte_meta(), make_split(tokens, {0, tokens.size()}), make_split({}, {0}));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  const std::string message = open_error(path);
  EXPECT_TRUE(contains(message, "not a readable HDF5 token file (truncated or corrupt")) << message;
}

TEST(TokenStore, WrongFormatAttributeIsRejected) {
  TempDir dir;
  const std::string path = dir.file("other.h5");
  write_token_store(path, byte_meta(), make_split({1, 2}, {0, 2}), make_split({}, {0}));
  replace_string_attribute(path, "format", "someone-elses-tokens");
  const std::string message = open_error(path);
  EXPECT_TRUE(contains(message, "format is 'someone-elses-tokens', expected 'pipelane-tokens'"))
      << message;
}

TEST(TokenStore, HdfFileWithoutFormatAttributeIsRejected) {
  TempDir dir;
  const std::string path = dir.file("plain.h5");
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  H5Fclose(file);
  EXPECT_TRUE(contains(open_error(path), "not a pipelane token file"));
}

TEST(TokenStore, NewerFormatVersionIsRejected) {
  TempDir dir;
  const std::string path = dir.file("v2.h5");
  write_token_store(path, byte_meta(), make_split({1, 2}, {0, 2}), make_split({}, {0}));
  const int version = 2;
  replace_root_attribute(path, "format_version", H5T_NATIVE_INT, &version);
  const std::string message = open_error(path);
  EXPECT_TRUE(contains(message, "format_version is 2, this build reads 1")) << message;
}

TEST(TokenStore, TokenIdAtOrAboveVocabSizeIsRejected) {
  TempDir dir;
  const std::string path = dir.file("vocab.h5");
  write_token_store(path, byte_meta(), make_split({1, 2, 255}, {0, 3}), make_split({}, {0}));
  const std::uint32_t vocab_size = 100;
  replace_root_attribute(path, "vocab_size", H5T_NATIVE_UINT32, &vocab_size);
  const std::string message = open_error(path);
  EXPECT_TRUE(contains(message, "token id 255 at position 2 is >= vocab_size 100")) << message;
}

// The streaming writer: documents of both splits interleaved and appended in pieces, with more
// tokens than one write buffer, read back as the splits they make; the checksum is the one of
// the whole splits.
TEST(TokenStoreWriter, InterleavedPiecesReadBackAsWholeSplits) {
  TempDir dir;
  const std::string path = dir.file("stream.h5");
  std::mt19937 generator(17);
  TokenSplit expected[2] = {{{}, {0}}, {{}, {0}}};
  {
    TokenStoreWriter writer(path, {"gpt2", 50257, {"a.txt", "b.jsonl"}, ""});
    for (int document = 0; document < 3000; ++document) {
      const int split = generator() % 5 == 0;  // about a fifth validates
      const auto which = split ? TokenStoreWriter::Split::kValid : TokenStoreWriter::Split::kTrain;
      const std::size_t length = generator() % 1000;  // empty documents too
      std::vector<std::uint32_t> tokens(length);
      for (auto& t : tokens) t = generator() % 50257;
      for (std::size_t pos = 0; pos < length;) {
        const std::size_t piece = std::min<std::size_t>(length - pos, 1 + generator() % 300);
        writer.append(which, std::span<const std::uint32_t>(tokens).subspan(pos, piece));
        pos += piece;
      }
      writer.end_document(which);
      expected[split].tokens.insert(expected[split].tokens.end(), tokens.begin(), tokens.end());
      expected[split].doc_offsets.push_back(expected[split].tokens.size());
    }
    EXPECT_EQ(writer.tokens(TokenStoreWriter::Split::kTrain), expected[0].tokens.size());
    EXPECT_EQ(writer.documents(TokenStoreWriter::Split::kValid), expected[1].doc_offsets.size() - 1);
    writer.finish();
  }
  ASSERT_GT(expected[0].tokens.size(), std::size_t{1} << 20);  // several write buffers
  const TokenStore store = TokenStore::open(path);
  EXPECT_EQ(store.train().tokens, expected[0].tokens);
  EXPECT_EQ(store.train().doc_offsets, expected[0].doc_offsets);
  EXPECT_EQ(store.valid().tokens, expected[1].tokens);
  EXPECT_EQ(store.valid().doc_offsets, expected[1].doc_offsets);
  EXPECT_EQ(store.meta().checksum, token_store_checksum(expected[0], expected[1]));
  EXPECT_EQ(store.meta().sources, (std::vector<std::string>{"a.txt", "b.jsonl"}));
  EXPECT_EQ(token_dataset_width(path), 2u);  // GPT-2's 50257 ids fit uint16
}

TEST(TokenStoreWriter, UnfinishedOrRefusedWritesLeaveNoFile) {
  TempDir dir;
  {
    TokenStoreWriter writer(dir.file("a.h5"), byte_meta());
    const std::vector<std::uint32_t> tokens{1, 2, 3};
    writer.append(TokenStoreWriter::Split::kTrain, tokens);
  }  // an error on the way: never finished
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  {
    TokenStoreWriter writer(dir.file("b.h5"), byte_meta());
    const std::vector<std::uint32_t> tokens{1, 256};
    try {
      writer.append(TokenStoreWriter::Split::kValid, tokens);
      FAIL() << "expected DataError";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()), dir.file("b.h5") + ": token id 256 is >= vocab_size 256");
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_THROW(TokenStoreWriter(dir.file("no/such/dir/c.h5"), byte_meta()), DataError);
}

// Replaces /train/tokens by a dataset declaring `count` uint16 tokens whose data is never written
// (what a crafted or unfinished file looks like), and doc_offsets by {0, count} to match.
void declare_unstored_train_tokens(const std::string& path, hsize_t count, bool chunked) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Ldelete(file, "/train/tokens", H5P_DEFAULT), 0);
  ASSERT_GE(H5Ldelete(file, "/train/doc_offsets", H5P_DEFAULT), 0);
  const hid_t create = H5Pcreate(H5P_DATASET_CREATE);
  const hsize_t chunk = 1 << 16;
  if (chunked) {
    ASSERT_GE(H5Pset_chunk(create, 1, &chunk), 0);
  }
  const hid_t space = H5Screate_simple(1, &count, nullptr);
  const hid_t tokens = H5Dcreate2(file, "/train/tokens", H5T_STD_U16LE, space, H5P_DEFAULT, create, H5P_DEFAULT);
  ASSERT_GE(tokens, 0);
  const hsize_t two = 2;
  const std::uint64_t offsets[2] = {0, count};
  const hid_t offsets_space = H5Screate_simple(1, &two, nullptr);
  const hid_t doc_offsets = H5Dcreate2(file, "/train/doc_offsets", H5T_STD_U64LE, offsets_space, H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(doc_offsets, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets), 0);
  H5Dclose(doc_offsets);
  H5Sclose(offsets_space);
  H5Dclose(tokens);
  H5Sclose(space);
  H5Pclose(create);
  ASSERT_GE(H5Fclose(file), 0);
}

// 2^28 declared tokens with none stored used to train on 268 M zeros; 2^30 died in std::bad_alloc.
TEST(TokenStore, DeclaredTokensThatAreNotStoredAreRefused) {
  TempDir dir;
  for (const hsize_t count : {hsize_t{1} << 28, hsize_t{1} << 30}) {
    for (const bool chunked : {false, true}) {
      const std::string path = dir.file("lie-" + std::to_string(count) + (chunked ? "-chunked.h5" : ".h5"));
      write_token_store(path, byte_meta(), make_split({1, 2}, {0, 2}), make_split({}, {0}));
      declare_unstored_train_tokens(path, count, chunked);
      const std::string message = open_error(path);
      EXPECT_TRUE(contains(message, ": /train/tokens: declares " + std::to_string(count) + " values")) << message;
      EXPECT_TRUE(contains(message, "but the file stores 0 of its")) << message;
    }
  }
}

// Data that is really stored but does not fit in memory: the failure names the file and dataset.
// Address space is limited in a forked child, so the allocation fails on any machine.
TEST(TokenStore, AllocationFailureNamesTheFileAndDataset) {
  TempDir dir;
  const std::string path = dir.file("big.h5");
  const std::vector<std::uint32_t> zeros(std::size_t{1} << 24, 0);  // 64 MiB in memory, KiB compressed
  write_token_store(path, byte_meta(), make_split(zeros, {0, zeros.size()}), make_split({}, {0}));
  EXPECT_EXIT(
      {
        rlimit limit{};
        getrlimit(RLIMIT_AS, &limit);
        // What this process maps already (from /proc/self/statm, in pages) plus 32 MiB: room for
        // HDF5's buffers, not for the 64 MiB of tokens.
        long pages = 0;
        if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
          if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
          std::fclose(statm);
        }
        limit.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (32u << 20);
        setrlimit(RLIMIT_AS, &limit);
        try {
          TokenStore::open(path);
        } catch (const DataError& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(0);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "big.h5: /train/tokens: cannot allocate 64.0 MiB to read its 16777216 values");
}

}  // namespace
}  // namespace pipelane
