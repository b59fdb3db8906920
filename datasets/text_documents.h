// Raw text in, documents out. Reading goes through zlib so .txt and .txt.gz are the same to callers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/utf8.h"

struct gzFile_s;  // zlib's file handle

namespace pipelane {

enum class DocumentSplit {
  kBlankLines,  // paragraphs separated by one or more blank (whitespace-only) lines
  kWholeFile,   // each input file is one document
};

// "blank-lines" or "whole-file"; DataError otherwise.
DocumentSplit parse_document_split(std::string_view name);

// The whole file, decompressed when it is gzip (zlib reads plain files transparently).
// DataError naming the file when it is missing, unreadable or a corrupt gzip stream.
std::string read_text_file(const std::string& path);

// DataError unless `path` names something read_text_file can open: missing, a directory.
void check_text_input(const std::string& path);

// The same file read a piece at a time.
class TextFileReader {
 public:
  explicit TextFileReader(const std::string& path);  // DataError: missing, a directory, unreadable
  ~TextFileReader();
  TextFileReader(const TextFileReader&) = delete;
  TextFileReader& operator=(const TextFileReader&) = delete;
  // Appends up to `max_bytes` decompressed bytes to `out`; false (nothing appended) at the end.
  // DataError for a read error or a gzip stream that is corrupt or cut short.
  bool read(std::string& out, std::size_t max_bytes);
  std::uint64_t stored_bytes_read() const;  // of the file as stored (compressed), for progress

 private:
  std::string path_;
  ::gzFile_s* file_;
};

// Documents in file order. A paragraph keeps its own line breaks (including the last one), so the
// documents concatenated give back the text minus its blank lines. Empty documents are dropped:
// they carry no tokens and would only make empty entries in doc_offsets.
std::vector<std::string> split_documents(std::string_view text, DocumentSplit split);

// Where a tokenizer lets a document be cut: can_cut(text, p) looks at raw bytes text[p - 1] and
// text[p] (0 < p < text.size()) and accepts only positions where tokenizing text[..p) and
// text[p..) separately gives the ids of the whole, and where no UTF-8 sequence, valid or not, can
// straddle the cut (text[p] is ASCII or a lead byte), so the two sides can be repaired alone.
struct CutRule {
  bool (*can_cut)(std::string_view text, std::size_t p) = nullptr;
  const char* description = "";  // "a space or line break after a printable ASCII character"
};

struct SegmentLimits {
  // Documents longer than this are cut at the first cut point past it.
  std::size_t segment_bytes = std::size_t{256} << 10;
  // The most held whole: a stretch of a document with no cut point, a blank-so-far line, a JSON
  // Lines record. Past it the input is refused with one line that says how to raise it.
  std::size_t max_unsplit_bytes = std::size_t{64} << 20;
};

// "64 MiB" (or "4096 bytes" below 1 MiB): max_unsplit_bytes for messages.
std::string unsplit_limit_text(const SegmentLimits& limits);

// split_documents over a stream: bytes go in as they are read, documents come out as raw
// segments (the bytes as stored, before any UTF-8 repair), long documents cut into segments of
// about limits.segment_bytes where `cut` allows. Memory is bounded by the limits, not the input.
class DocumentCutter {
 public:
  // (raw bytes, last segment of its document, offset of the first byte in the stream)
  using Emit = std::function<void(std::string_view raw, bool ends_document, std::uint64_t offset)>;
  // `where` names the stream in errors (the file path).
  DocumentCutter(DocumentSplit split, CutRule cut, SegmentLimits limits, std::string where);
  void feed(std::string_view bytes, const Emit& emit);
  void finish(const Emit& emit);  // end of input: emits what is left

 private:
  void cut_if_long(const Emit& emit);
  void end_document(const Emit& emit);

  DocumentSplit split_;
  CutRule cut_;
  SegmentLimits limits_;
  std::string where_;
  std::uint64_t offset_ = 0;  // stream offset of the next byte fed
  // The current document's bytes not yet emitted and where they start; how far they were
  // searched for cut points and the last one found.
  std::string document_;
  std::uint64_t document_offset_ = 0;
  std::size_t scanned_ = 1, last_cut_ = 0;
  // Blank lines: the current line while it is blank so far (a blank line ends the document, a
  // line with text joins it), and whether the current line already joined the document.
  std::string blank_line_;
  bool line_joined_ = false;
};

// True for .jsonl / .jsonl.gz / .json.gz / .ndjson names.
bool is_jsonl_path(const std::string& path);

}  // namespace pipelane
