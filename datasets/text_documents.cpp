#include "datasets/text_documents.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "datasets/data_error.h"

namespace pipelane {

DocumentSplit parse_document_split(std::string_view name) {
  if (name == "blank-lines") return DocumentSplit::kBlankLines;
  if (name == "whole-file") return DocumentSplit::kWholeFile;
  throw DataError("unknown document split '" + std::string(name) +
                  "' (expected 'blank-lines' or 'whole-file')");
}

void check_text_input(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw DataError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    throw DataError(path + ": is a directory, expected a .txt or .gz file");
}

TextFileReader::TextFileReader(const std::string& path) : path_(path), file_(nullptr) {
  check_text_input(path);
  file_ = gzopen(path.c_str(), "rb");
  if (!file_) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  gzbuffer(file_, 1 << 20);
}

TextFileReader::~TextFileReader() {
  if (file_) gzclose(file_);
}

bool TextFileReader::read(std::string& out, std::size_t max_bytes) {
  const std::size_t start = out.size();
  out.resize(start + max_bytes);
  const int n = gzread(file_, out.data() + start, static_cast<unsigned>(max_bytes));
  if (n < 0) {
    out.resize(start);
    int code = 0;
    const char* message = gzerror(file_, &code);
    throw DataError(path_ + ": cannot read, expected text or gzip-compressed text (" +
                    (message ? message : "zlib error") + ")");
  }
  out.resize(start + static_cast<std::size_t>(n));
  if (n > 0) return true;
  // gzread reports a gzip stream cut short as end of file; gzerror is the only place that says so.
  int code = Z_OK;
  const char* message = gzerror(file_, &code);
  if (code != Z_OK && code != Z_STREAM_END)
    throw DataError(path_ + ": truncated or corrupt gzip stream (" + (message ? message : "") + ")");
  return false;
}

std::uint64_t TextFileReader::stored_bytes_read() const {
  const z_off_t offset = gzoffset(file_);
  return offset < 0 ? 0 : static_cast<std::uint64_t>(offset);
}

std::string read_text_file(const std::string& path) {
  TextFileReader reader(path);
  std::string text;
  while (reader.read(text, 1 << 20)) {
  }
  return text;
}

namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

}  // namespace

std::vector<std::string> split_documents(std::string_view text, DocumentSplit split) {
  std::vector<std::string> documents;
  const DocumentCutter::Emit collect = [&](std::string_view raw, bool, std::uint64_t) { documents.emplace_back(raw); };
  constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
  DocumentCutter cutter(split, CutRule{}, SegmentLimits{kNoLimit, kNoLimit}, "");
  cutter.feed(text, collect);
  cutter.finish(collect);
  return documents;
}

std::string unsplit_limit_text(const SegmentLimits& limits) {
  const std::size_t bytes = limits.max_unsplit_bytes;
  return bytes % (std::size_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

DocumentCutter::DocumentCutter(DocumentSplit split, CutRule cut, SegmentLimits limits, std::string where)
    : split_(split), cut_(cut), limits_(limits), where_(std::move(where)) {
  if (limits_.max_unsplit_bytes < limits_.segment_bytes)
    throw std::invalid_argument("DocumentCutter: max_unsplit_bytes must be >= segment_bytes");
}

void DocumentCutter::feed(std::string_view bytes, const Emit& emit) {
  if (split_ == DocumentSplit::kWholeFile) {
    if (document_.empty()) document_offset_ = offset_;
    document_.append(bytes);
    offset_ += bytes.size();
    cut_if_long(emit);
    return;
  }
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::size_t newline = bytes.find('\n', pos);
    const bool line_ends = newline != std::string_view::npos;
    const std::string_view part = bytes.substr(pos, line_ends ? newline + 1 - pos : std::string_view::npos);
    if (line_joined_) {
      document_.append(part);
      line_joined_ = !line_ends;
    } else if (is_blank(part)) {  // the line is blank so far
      if (line_ends) {
        blank_line_.clear();
        end_document(emit);
      } else {
        blank_line_.append(part);
        if (blank_line_.size() > limits_.max_unsplit_bytes)
          throw DataError(where_ + ": byte " + std::to_string(offset_ + part.size() - blank_line_.size()) +
                          ": a line of more than " + unsplit_limit_text(limits_) +
                          " of blank characters (the most held whole; prepare-data's --max-unsplit-mb)");
      }
    } else {  // the line has text: it joins the document, blank start included
      if (document_.empty()) document_offset_ = offset_ - blank_line_.size();
      document_.append(blank_line_);
      blank_line_.clear();
      document_.append(part);
      line_joined_ = !line_ends;
    }
    offset_ += part.size();
    pos += part.size();
    cut_if_long(emit);
  }
}

void DocumentCutter::finish(const Emit& emit) {
  blank_line_.clear();  // a last line without a line break that is blank ends the document too
  line_joined_ = false;
  end_document(emit);
}

void DocumentCutter::cut_if_long(const Emit& emit) {
  const auto emit_up_to = [&](std::size_t cut) {
    emit(std::string_view(document_).substr(0, cut), false, document_offset_);
    document_.erase(0, cut);
    document_offset_ += cut;
    scanned_ = std::max<std::size_t>(1, scanned_ - cut);  // what was searched stays searched
    last_cut_ = 0;  // none in what was searched of the rest
  };
  while (document_.size() > limits_.segment_bytes) {
    // The first cut point at or past the segment size ends the segment.
    std::size_t cut = 0;
    for (; scanned_ < document_.size() && cut == 0; ++scanned_)
      if (cut_.can_cut(document_, scanned_)) {
        last_cut_ = scanned_;
        if (scanned_ >= limits_.segment_bytes) cut = scanned_;
      }
    if (cut > 0) {
      emit_up_to(cut);
      continue;
    }
    // None yet: what follows the last cut point is held until one comes, up to the limit.
    if (document_.size() - last_cut_ > limits_.max_unsplit_bytes)
      throw DataError(where_ + ": byte " + std::to_string(document_offset_ + last_cut_) + ": more than " +
                      unsplit_limit_text(limits_) + " of text with no place to cut it between tokens (" +
                      cut_.description + "); it would be held whole (the limit is prepare-data's --max-unsplit-mb)");
    if (document_.size() > limits_.max_unsplit_bytes && last_cut_ > 0) {
      emit_up_to(last_cut_);  // a short segment, to keep what is held within the limit
      continue;
    }
    return;
  }
}

void DocumentCutter::end_document(const Emit& emit) {
  if (!document_.empty()) emit(document_, true, document_offset_);
  document_.clear();
  scanned_ = 1;
  last_cut_ = 0;
}

bool is_jsonl_path(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.size() > 3 && name.ends_with(".gz")) name.resize(name.size() - 3);
  return name.ends_with(".jsonl") || name.ends_with(".ndjson") || name.ends_with(".json");
}

}  // namespace pipelane
