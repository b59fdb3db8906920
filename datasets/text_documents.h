// Raw text in, documents out. Reading goes through zlib so .txt and .txt.gz are the same to callers.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "datasets/utf8.h"

namespace pipelane {

enum class DocumentSplit {
  kBlankLines,  // paragraphs separated by one or more blank (whitespace-only) lines
  kWholeFile,   // each input file is one document
};

// "blank-lines" or "whole-file"; DataError otherwise.
DocumentSplit parse_document_split(std::string_view name);
const char* document_split_name(DocumentSplit split);

// The whole file, decompressed when it is gzip (zlib reads plain files transparently).
// DataError naming the file when it is missing, unreadable or a corrupt gzip stream.
std::string read_text_file(const std::string& path);

// Documents in file order. A paragraph keeps its own line breaks (including the last one), so the
// documents concatenated give back the text minus its blank lines. Empty documents are dropped:
// they carry no tokens and would only make empty entries in doc_offsets.
std::vector<std::string> split_documents(std::string_view text, DocumentSplit split);

}  // namespace pipelane

namespace pipelane {

// Documents of a JSON Lines file (plain or gzip): one JSON object per non-blank line, the document
// being the string in `field`. DataError "<path>:<line>: ..." for invalid JSON, a line that is not an
// object, a missing or non-string field. Invalid UTF-8 in a line is repaired or refused per `policy`
// before parsing; `replaced` (if given) is increased by the sequences replaced. Documents of only
// whitespace are dropped, as blank paragraphs of a text file are.
std::vector<std::string> read_jsonl_documents(const std::string& path, const std::string& field,
                                              InvalidUtf8 policy, std::size_t* replaced = nullptr);

// True for .jsonl / .jsonl.gz / .json.gz / .ndjson names.
bool is_jsonl_path(const std::string& path);

}  // namespace pipelane
