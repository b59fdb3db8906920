#include "datasets/text_documents.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "datasets/data_error.h"

namespace pipelane {

DocumentSplit parse_document_split(std::string_view name) {
  if (name == "blank-lines") return DocumentSplit::kBlankLines;
  if (name == "whole-file") return DocumentSplit::kWholeFile;
  throw DataError("unknown document split '" + std::string(name) +
                  "' (expected 'blank-lines' or 'whole-file')");
}

const char* document_split_name(DocumentSplit split) {
  return split == DocumentSplit::kBlankLines ? "blank-lines" : "whole-file";
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw DataError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    throw DataError(path + ": is a directory, expected a .txt or .gz file");

  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  gzbuffer(file.get(), 1 << 20);

  std::string text;
  std::vector<char> chunk(1 << 20);
  for (;;) {
    const int n = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw DataError(path + ": cannot read, expected text or gzip-compressed text (" +
                      (message ? message : "zlib error") + ")");
    }
    if (n == 0) break;
    text.append(chunk.data(), static_cast<std::size_t>(n));
  }
  // gzread reports a gzip stream cut short as end of file; gzerror is the only place that says so.
  int code = Z_OK;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END)
    throw DataError(path + ": truncated or corrupt gzip stream (" + (message ? message : "") + ")");
  return text;
}

namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

}  // namespace

std::vector<std::string> split_documents(std::string_view text, DocumentSplit split) {
  std::vector<std::string> documents;
  if (split == DocumentSplit::kWholeFile) {
    if (!text.empty()) documents.emplace_back(text);
    return documents;
  }
  std::string paragraph;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t newline = text.find('\n', pos);
    const std::size_t end = newline == std::string_view::npos ? text.size() : newline + 1;
    const std::string_view line = text.substr(pos, end - pos);
    if (is_blank(line)) {
      if (!paragraph.empty()) documents.push_back(std::move(paragraph));
      paragraph.clear();
    } else {
      paragraph.append(line);
    }
    pos = end;
  }
  if (!paragraph.empty()) documents.push_back(std::move(paragraph));
  return documents;
}

}  // namespace pipelane

#include <nlohmann/json.hpp>

namespace pipelane {

bool is_jsonl_path(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.size() > 3 && name.ends_with(".gz")) name.resize(name.size() - 3);
  return name.ends_with(".jsonl") || name.ends_with(".ndjson") || name.ends_with(".json");
}

std::vector<std::string> read_jsonl_documents(const std::string& path, const std::string& field,
                                              InvalidUtf8 policy, std::size_t* replaced) {
  const std::string text = read_text_file(path);
  std::vector<std::string> documents;
  std::size_t pos = 0, line_number = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view raw(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (is_blank(raw)) continue;
    const std::string where = path + ":" + std::to_string(line_number);
    std::size_t replaced_here = 0;
    const std::string line = repair_utf8(raw, policy, where, &replaced_here);
    if (replaced) *replaced += replaced_here;
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(where + ": invalid JSON, expected one object per line (" + e.what() + ")");
    }
    if (!object.is_object()) throw DataError(where + ": expected a JSON object, got " + object.type_name());
    const auto it = object.find(field);
    if (it == object.end())
      throw DataError(where + ": no field \"" + field + "\" (set the field name with --jsonl-field)");
    if (!it->is_string())
      throw DataError(where + ": field \"" + field + "\" is " + it->type_name() + ", expected a string");
    std::string document = it->get<std::string>();
    if (!is_blank(document)) documents.push_back(std::move(document));
  }
  return documents;
}

}  // namespace pipelane
