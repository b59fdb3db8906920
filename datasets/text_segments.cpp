#include "datasets/text_segments.h"

#include <nlohmann/json.hpp>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

constexpr std::size_t kReadBytes = std::size_t{1} << 20;

bool is_blank_text(std::string_view text) { return text.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos; }

}  // namespace

TextSegmentReader::TextSegmentReader(const std::string& path, TextFormat format, InvalidUtf8 policy, CutRule cut,
                                     SegmentLimits limits)
    : path_(path),
      format_(std::move(format)),
      policy_(policy),
      limits_(limits),
      file_(path),
      cutter_(format_.split, cut, limits, path) {}

bool TextSegmentReader::next(TextSegment& segment) {
  const DocumentCutter::Emit take = [this](std::string_view raw, bool ends, std::uint64_t offset) {
    take_text_segment(raw, ends, offset);
  };
  while (ready_.empty() && !at_end_) {
    buffer_.clear();
    if (file_.read(buffer_, kReadBytes)) {
      if (format_.jsonl)
        take_jsonl(buffer_);
      else
        cutter_.feed(buffer_, take);
      continue;
    }
    at_end_ = true;
    if (format_.jsonl) {
      if (!line_.empty()) take_jsonl_line(line_);  // a last line without a line break
      line_.clear();
    } else {
      cutter_.finish(take);
    }
  }
  if (ready_.empty()) return false;
  segment = std::move(ready_.front());
  ready_.pop_front();
  return true;
}

void TextSegmentReader::take_text_segment(std::string_view raw, bool ends_document, std::uint64_t offset) {
  std::size_t replaced = 0;
  std::string text = repair_utf8(raw, policy_, path_, &replaced, offset);
  replaced_ += replaced;
  ready_.push_back({std::move(text), ends_document, path_ + ": byte " + std::to_string(offset)});
}

void TextSegmentReader::take_jsonl(std::string_view bytes) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::size_t newline = bytes.find('\n', pos);
    if (newline == std::string_view::npos) {
      line_.append(bytes.substr(pos));
      check_line_length(line_.size());
      return;
    }
    if (line_.empty()) {
      take_jsonl_line(bytes.substr(pos, newline - pos));
    } else {
      line_.append(bytes.substr(pos, newline - pos));
      take_jsonl_line(line_);
      line_.clear();
    }
    pos = newline + 1;
  }
}

void TextSegmentReader::check_line_length(std::size_t bytes) const {
  if (bytes > limits_.max_unsplit_bytes)
    throw DataError(path_ + ":" + std::to_string(line_number_ + 1) + ": a line longer than " +
                    unsplit_limit_text(limits_) +
                    " (a record is held whole; the limit is prepare-data's --max-unsplit-mb)");
}

void TextSegmentReader::take_jsonl_line(std::string_view raw) {
  check_line_length(raw.size());
  ++line_number_;
  if (is_blank_text(raw)) return;
  const std::string where = path_ + ":" + std::to_string(line_number_);
  std::size_t replaced = 0;
  const std::string line = repair_utf8(raw, policy_, where, &replaced);
  replaced_ += replaced;
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(where + ": invalid JSON, expected one object per line (" + printable(e.what()) + ")");
  }
  if (!object.is_object()) throw DataError(where + ": expected a JSON object, got " + object.type_name());
  const auto it = object.find(format_.jsonl_field);
  if (it == object.end())
    throw DataError(where + ": no field \"" + printable(format_.jsonl_field) +
                    "\" (set the field name with --jsonl-field)");
  if (!it->is_string())
    throw DataError(where + ": field \"" + format_.jsonl_field + "\" is " + it->type_name() +
                    ", expected a string");
  std::string document = it->get<std::string>();
  if (!is_blank_text(document)) ready_.push_back({std::move(document), true, where});
}

}  // namespace pipelane
