// Text inputs read as a stream of bounded segments, so that memory follows the segment size and
// not the file size: a gzip bomb streams through, or stops with one line; it never fills memory.
// A segment is a whole document, or a piece of a long one cut where the tokenizer allows it (see
// CutRule), so the ids of the segments concatenated are the ids of the whole document.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "datasets/text_documents.h"
#include "datasets/utf8.h"

namespace pipelane {

struct TextSegment {
  std::string text;           // valid UTF-8 (repaired, or refused, per the policy)
  bool ends_document = true;  // false: the document continues in the next segment
  std::string where;          // "path: byte N" or "path:LINE", for messages about this segment
};

// How an input file is read.
struct TextFormat {
  bool jsonl = false;                                // JSON Lines: one document per record
  DocumentSplit split = DocumentSplit::kBlankLines;  // text: how documents are split
  std::string jsonl_field = "text";                  // JSON Lines: the field holding the text
};

// One input file (.txt, .jsonl, either .gz) as segments in file order. Every failure is one
// DataError naming the file and the byte offset or line.
// JSON Lines: one JSON object per non-blank line, the document being the string in the field;
// "<path>:<line>: ..." for invalid JSON, a line that is not an object, a missing or non-string
// field, a line longer than limits.max_unsplit_bytes. Invalid UTF-8 is repaired or refused per
// the policy before parsing. Documents of only whitespace are dropped, as blank paragraphs are.
class TextSegmentReader {
 public:
  TextSegmentReader(const std::string& path, TextFormat format, InvalidUtf8 policy, CutRule cut,
                    SegmentLimits limits);

  // The next segment; false at the end of the file.
  bool next(TextSegment& segment);
  std::size_t replaced() const { return replaced_; }  // invalid UTF-8 sequences replaced so far
  std::uint64_t stored_bytes_read() const { return file_.stored_bytes_read(); }

 private:
  void take_text_segment(std::string_view raw, bool ends_document, std::uint64_t offset);
  void take_jsonl(std::string_view bytes);
  void take_jsonl_line(std::string_view raw);
  void check_line_length(std::size_t bytes) const;

  std::string path_;
  TextFormat format_;
  InvalidUtf8 policy_;
  SegmentLimits limits_;
  TextFileReader file_;
  DocumentCutter cutter_;
  bool at_end_ = false;
  std::string buffer_;  // the last piece read
  std::deque<TextSegment> ready_;
  std::size_t replaced_ = 0;
  std::string line_;  // JSON Lines: the current line while it is incomplete
  std::size_t line_number_ = 0;
};

}  // namespace pipelane
