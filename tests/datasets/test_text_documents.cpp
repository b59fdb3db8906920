#include <gtest/gtest.h>

#include "datasets/data_error.h"
#include "datasets/text_documents.h"
#include "tests/datasets/test_files.h"

namespace pipelane {
namespace {

using Docs = std::vector<std::string>;

TEST(TextDocuments, BlankLinesSeparateParagraphs) {
  EXPECT_EQ(split_documents("a\nb\n\n\nc\n  \t\nd", DocumentSplit::kBlankLines),
            (Docs{"a\nb\n", "c\n", "d"}));
}

TEST(TextDocuments, LeadingTrailingBlankLinesAndCrlfAreSeparators) {
  EXPECT_EQ(split_documents("\n\r\nx\r\n\r\n y\n\n", DocumentSplit::kBlankLines),
            (Docs{"x\r\n", " y\n"}));
  EXPECT_EQ(split_documents("\n \n\n", DocumentSplit::kBlankLines), Docs{});
}

TEST(TextDocuments, WholeFileIsOneDocument) {
  EXPECT_EQ(split_documents("a\n\nb\n", DocumentSplit::kWholeFile), (Docs{"a\n\nb\n"}));
  EXPECT_EQ(split_documents("", DocumentSplit::kWholeFile), Docs{});
}

TEST(TextDocuments, ParsesSplitNames) {
  EXPECT_EQ(parse_document_split("blank-lines"), DocumentSplit::kBlankLines);
  EXPECT_EQ(parse_document_split("whole-file"), DocumentSplit::kWholeFile);
  EXPECT_THROW(parse_document_split("sentences"), DataError);
}

TEST(TextDocuments, ReadsPlainAndGzipFiles) {
  test_support::TempDir dir;
  const std::string text = "first\n\nsecond \xC3\xA9\n";
  test_support::write_file(dir.file("a.txt"), text);
  test_support::write_gzip_file(dir.file("a.txt.gz"), text);
  EXPECT_EQ(read_text_file(dir.file("a.txt")), text);
  EXPECT_EQ(read_text_file(dir.file("a.txt.gz")), text);
}

TEST(TextDocuments, MissingAndTruncatedFilesAreDataErrors) {
  test_support::TempDir dir;
  try {
    read_text_file(dir.file("absent.txt"));
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("absent.txt: no such file"), std::string::npos) << e.what();
  }
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
  test_support::write_gzip_file(dir.file("big.gz"), text);
  const auto size = std::filesystem::file_size(dir.file("big.gz"));
  std::filesystem::resize_file(dir.file("big.gz"), size / 2);
  EXPECT_THROW(read_text_file(dir.file("big.gz")), DataError);
}

}  // namespace
}  // namespace pipelane
