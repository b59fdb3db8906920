#include <gtest/gtest.h>

#include <cmath>

#include "datasets/byte_tokenizer.h"
#include "datasets/token_store.h"
#include "datasets/unigram.h"
#include "tests/datasets/test_files.h"
#include "trainer/prepare_data_command.h"

namespace pipelane {
namespace {

using test_support::TempDir;

int run_prepare_data(std::vector<std::string> args) {
  args.insert(args.begin(), "prepare-data");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return prepare_data_command(static_cast<int>(args.size()), argv.data());
}

std::string decode_document(const TokenSplit& split, std::size_t doc) {
  const std::vector<std::uint32_t> ids(split.tokens.begin() + split.doc_offsets[doc],
                                       split.tokens.begin() + split.doc_offsets[doc + 1]);
  return ByteTokenizer().decode(ids);
}

std::size_t document_count(const TokenSplit& split) { return split.doc_offsets.size() - 1; }

TEST(PrepareData, TextFileWithParagraphsEndToEnd) {
  TempDir dir;
  std::string text;
  std::vector<std::string> paragraphs;
  for (int i = 0; i < 20; ++i) {
    paragraphs.push_back("paragraph " + std::to_string(i) + " caf\xC3\xA9\nsecond line\n");
    text += paragraphs.back() + "\n\n";
  }
  test_support::write_file(dir.file("corpus.txt"), text);
  const std::string output = dir.file("out/tokens.h5");  // parent directory is created

  ::testing::internal::CaptureStdout();
  ASSERT_EQ(run_prepare_data({"--input", dir.file("corpus.txt"), "--output", output,
                              "--valid-fraction", "0.25"}),
            0);
  const std::string summary = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(summary.find("20 documents"), std::string::npos) << summary;
  EXPECT_NE(summary.find(output), std::string::npos) << summary;

  const TokenStore store = TokenStore::open(output);
  EXPECT_EQ(store.meta().tokenizer, "byte");
  EXPECT_EQ(store.meta().vocab_size, 256u);
  EXPECT_EQ(store.meta().sources, std::vector<std::string>{dir.file("corpus.txt")});
  // f = 0.25 holds out documents 3, 7, 11, 15, 19.
  ASSERT_EQ(document_count(store.train()), 15u);
  ASSERT_EQ(document_count(store.valid()), 5u);
  std::size_t train_doc = 0, valid_doc = 0;
  for (int i = 0; i < 20; ++i) {
    if (i % 4 == 3)
      EXPECT_EQ(decode_document(store.valid(), valid_doc++), paragraphs[i]);
    else
      EXPECT_EQ(decode_document(store.train(), train_doc++), paragraphs[i]);
  }
}

TEST(PrepareData, GzipAndTextInputsAsWholeFileDocuments) {
  TempDir dir;
  const std::string plain = "plain file\n\nwith two paragraphs\n";
  const std::string zipped = "compressed \xE2\x9C\x93\n\n\nfile\n";
  test_support::write_file(dir.file("a.txt"), plain);
  test_support::write_gzip_file(dir.file("b.txt.gz"), zipped);
  const std::string output = dir.file("whole.h5");

  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("a.txt"), dir.file("b.txt.gz"), "--output",
                                       output, "--documents", "whole-file", "--valid-fraction", "0.5"});
  ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);

  const TokenStore store = TokenStore::open(output);
  ASSERT_EQ(document_count(store.train()), 1u);  // f = 0.5: document 0 trains, document 1 validates
  ASSERT_EQ(document_count(store.valid()), 1u);
  EXPECT_EQ(decode_document(store.train(), 0), plain);
  EXPECT_EQ(decode_document(store.valid(), 0), zipped);
  EXPECT_EQ(store.meta().sources.size(), 2u);
}

// Runs a failing command; returns its stderr after checking it is the one promised line.
std::string expect_failure(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data(args);
  ::testing::internal::GetCapturedStdout();
  const std::string error = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 1);
  EXPECT_EQ(error.rfind("pipelane prepare-data: ", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), error.size() - 1) << "expected exactly one line: " << error;
  return error;
}

TEST(PrepareData, MissingInputFailsWithoutLeavingAnOutputFile) {
  TempDir dir;
  const std::string error =
      expect_failure({"--input", dir.file("absent.txt"), "--output", dir.file("out.h5")});
  EXPECT_NE(error.find("absent.txt: no such file"), std::string::npos) << error;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(PrepareData, RejectsBadOptionsAndEmptyInput) {
  TempDir dir;
  test_support::write_file(dir.file("text.txt"), "some text\n");
  test_support::write_file(dir.file("blank.txt"), "\n  \n\n");
  const std::string out = dir.file("out.h5");
  EXPECT_NE(expect_failure({"--input", dir.file("text.txt"), "--output", out, "--tokenizer", "bpe"})
                .find("unknown tokenizer 'bpe'"),
            std::string::npos);
  expect_failure({"--input", dir.file("text.txt"), "--output", out, "--documents", "lines"});
  expect_failure({"--input", dir.file("text.txt"), "--output", out, "--valid-fraction", "1"});
  expect_failure({"--input", dir.file("text.txt")});  // --output is required
  expect_failure({"--input", dir.file("blank.txt"), "--output", out});
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(PrepareData, HelpDocumentsEveryOptionAndDefault) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_prepare_data({"--help"}), 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  for (const char* expected : {"--input", "--output", "--tokenizer", "--documents", "--valid-fraction",
                               "jargon.txt.gz", "byte", "blank-lines", "whole-file", "0.05"})
    EXPECT_NE(help.find(expected), std::string::npos) << "missing " << expected << " in:\n" << help;
}

TEST(PrepareData, DefaultCorpusBeatsUniformUnderUnigram) {
  const std::string corpus = "/usr/share/doc/jargon-text/jargon.txt.gz";
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << corpus << " is not installed";
  TempDir dir;
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(run_prepare_data({"--output", dir.file("jargon.h5")}), 0);
  ::testing::internal::GetCapturedStdout();
  const TokenStore store = TokenStore::open(dir.file("jargon.h5"));
  EXPECT_GT(store.train().tokens.size(), 1000000u);
  const double valid_share = static_cast<double>(document_count(store.valid())) /
                             static_cast<double>(document_count(store.train()) + document_count(store.valid()));
  EXPECT_NEAR(valid_share, 0.05, 0.001);
  // English text in bytes: well under uniform ln(256) = 5.55, well above zero.
  const double entropy = unigram_cross_entropy(store.train(), store.valid(), 256);
  EXPECT_GT(entropy, 2.0);
  EXPECT_LT(entropy, 4.0);
}

}  // namespace
}  // namespace pipelane
