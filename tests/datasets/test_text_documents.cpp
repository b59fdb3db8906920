#include <gtest/gtest.h>

#include <random>

#include "datasets/data_error.h"
#include "datasets/text_documents.h"
#include "datasets/text_segments.h"
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

// ---- streaming: DocumentCutter and TextSegmentReader ----

struct Piece {
  std::string raw;
  bool ends_document;
  std::uint64_t offset;
};

// Everything a cutter emits for `text` fed in pieces of `feed_bytes`.
std::vector<Piece> cut(std::string_view text, DocumentSplit split, CutRule rule, SegmentLimits limits,
                       std::size_t feed_bytes) {
  std::vector<Piece> pieces;
  const DocumentCutter::Emit collect = [&](std::string_view raw, bool ends, std::uint64_t offset) {
    pieces.push_back({std::string(raw), ends, offset});
  };
  DocumentCutter cutter(split, rule, limits, "t.txt");
  for (std::size_t pos = 0; pos < text.size(); pos += feed_bytes) cutter.feed(text.substr(pos, feed_bytes), collect);
  cutter.finish(collect);
  return pieces;
}

// Segments of one document joined again, for comparison with split_documents.
Docs join_documents(const std::vector<Piece>& pieces) {
  Docs documents;
  std::string current;
  for (const Piece& piece : pieces) {
    current += piece.raw;
    if (piece.ends_document) documents.push_back(std::exchange(current, ""));
  }
  EXPECT_EQ(current, "") << "the last segment must end its document";
  return documents;
}

bool cut_before_space(std::string_view text, std::size_t p) { return text[p] == ' '; }
constexpr CutRule kSpaces{&cut_before_space, "a space"};

TEST(DocumentCutter, FedAnyWayItGivesTheDocumentsOfSplitDocuments) {
  std::mt19937 generator(9);
  std::string text;
  const char* pieces[] = {"word ", "w", "\n", "\n\n", "  \n", " \t", "\r\n", "para graph ", "x"};
  for (int i = 0; i < 4000; ++i) text += pieces[generator() % 9];
  for (const DocumentSplit split : {DocumentSplit::kBlankLines, DocumentSplit::kWholeFile})
    for (const std::size_t feed : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, text.size()})
      for (const std::size_t segment : {std::size_t{16}, std::size_t{1} << 20}) {
        const std::vector<Piece> pieces = cut(text, split, kSpaces, SegmentLimits{segment, 1 << 20}, feed);
        EXPECT_EQ(join_documents(pieces), split_documents(text, split)) << "feed " << feed << ", segment " << segment;
        for (const Piece& piece : pieces) {
          EXPECT_EQ(text.compare(piece.offset, piece.raw.size(), piece.raw), 0) << "offset " << piece.offset;
          // Cut where the rule allows only, and only once a document is past the segment size.
          if (!piece.ends_document) {
            EXPECT_EQ(text[piece.offset + piece.raw.size()], ' ');
            EXPECT_GE(piece.raw.size() + 64, segment);
          }
        }
      }
}

TEST(DocumentCutter, TextWithNoCutPointPastTheLimitIsOneLine) {
  const std::string text = "ok\n\n" + std::string(5000, 'x') + " y";
  try {
    cut(text, DocumentSplit::kBlankLines, kSpaces, SegmentLimits{1024, 4096}, 512);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("t.txt: byte 4: more than 4096 bytes of text with no place to cut it between "
                                          "tokens (a space)", 0),
              0u)
        << e.what();
  }
  // The same stretch with a cut point in it goes through.
  EXPECT_EQ(join_documents(cut("ok\n\n" + std::string(3000, 'x') + " " + std::string(3000, 'x'),
                               DocumentSplit::kBlankLines, kSpaces, SegmentLimits{1024, 4096}, 512)),
            (Docs{"ok\n", std::string(3000, 'x') + " " + std::string(3000, 'x')}));
  // So does a long blank-so-far line, up to the limit.
  EXPECT_THROW(cut("a\n" + std::string(5000, ' '), DocumentSplit::kBlankLines, kSpaces, SegmentLimits{1024, 4096}, 512),
               DataError);
}

TEST(TextSegmentReader, JsonlRecordLongerThanTheLimitIsOneLine) {
  test_support::TempDir dir;
  test_support::write_file(dir.file("big.jsonl"),
                           "{\"text\": \"a\"}\n{\"text\": \"" + std::string(10000, 'b') + "\"}\n");
  TextSegmentReader reader(dir.file("big.jsonl"), TextFormat{true}, InvalidUtf8::kReplace, kSpaces,
                           SegmentLimits{1024, 4096});
  TextSegment segment;
  try {
    reader.next(segment);  // lines are checked as they are read, before the records before them are used
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("big.jsonl:2: a line longer than 4096 bytes (a record is held whole"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipelane
