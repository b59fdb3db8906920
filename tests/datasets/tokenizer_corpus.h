// The text the tokenizers are checked on against the npm packages' encoders: real files of this
// machine and this repository, by kind (a few MB in all, so the suite stays quick):
//   code        this repository's sources, /usr/include headers
//   emoji       pip's vendored rich emoji table (ZWJ sequences, skin tones, flags) and spinners
//   non-Latin   vim's tutor in 30-odd languages, man pages in Russian, Ukrainian, Japanese,
//               Chinese and Korean
//   prose       the Jargon File
//   whitespace  header lines joined by long runs of spaces, tabs, line breaks (\n, \r\n) and
//               other Unicode spaces, 1 to 400 characters
// Files are cut into documents of at most 24 KiB at line breaks (the JavaScript encoders slow down
// on long ones); a missing file is left out (the sizes say what was used).
// U+FEFF and U+0085 are taken out: the JavaScript encoders' \s has the one and lacks the other,
// where the Rust engines the patterns were written for (and ours) use Unicode White_Space.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "datasets/text_documents.h"
#include "datasets/utf8.h"

namespace pipelane::test_support {

struct TokenizerCorpus {
  std::vector<std::string> documents;
  std::vector<std::string> kinds;           // per document
  std::map<std::string, std::size_t> bytes;  // per kind
  std::size_t removed_whitespace = 0;       // U+FEFF and U+0085 taken out
};

inline std::vector<std::string> sorted_files(const std::string& dir, const std::vector<std::string>& endings) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    const std::string p = entry.path().string();
    if (!entry.is_regular_file(ec)) continue;
    for (const std::string& end : endings)
      if (p.size() >= end.size() && p.compare(p.size() - end.size(), end.size(), end) == 0) files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string without_js_whitespace_differences(const std::string& text, std::size_t& removed) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "\xEF\xBB\xBF") == 0) { i += 2; ++removed; continue; }  // U+FEFF
    if (text.compare(i, 2, "\xC2\x85") == 0) { i += 1; ++removed; continue; }      // U+0085
    out += text[i];
  }
  return out;
}

inline void add_document(TokenizerCorpus& c, const std::string& kind, const std::string& text) {
  constexpr std::size_t kMaxDocument = 24u << 10;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.size();
    if (end - pos > kMaxDocument) {
      end = text.rfind('\n', pos + kMaxDocument);
      end = end == std::string::npos || end <= pos ? pos + kMaxDocument : end + 1;
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    }
    c.documents.push_back(text.substr(pos, end - pos));
    c.kinds.push_back(kind);
    c.bytes[kind] += end - pos;
    pos = end;
  }
}

inline void add_files(TokenizerCorpus& c, const std::string& kind, const std::vector<std::string>& files,
                      std::size_t budget) {
  for (const std::string& file : files) {
    if (c.bytes[kind] >= budget) return;
    std::string text = read_text_file(file);
    text = without_js_whitespace_differences(repair_utf8(text, InvalidUtf8::kReplace, file), c.removed_whitespace);
    std::size_t keep = std::min(text.size(), budget - c.bytes[kind]);
    while (keep < text.size() && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;  // whole characters
    add_document(c, kind, text.substr(0, keep));
  }
}

// Lines of `source` joined by whitespace runs of pseudo-random lengths and kinds (a fixed LCG).
inline std::string whitespace_runs(const std::string& source, std::size_t bytes) {
  const char* spaces[] = {" ", "\t", "\n", "\r\n", "\xE3\x80\x80" /* U+3000 */, "\xC2\xA0" /* U+00A0 */, "  \n"};
  std::string out;
  std::uint64_t state = 12345;
  const auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  std::size_t pos = 0;
  while (out.size() < bytes && !source.empty()) {
    std::size_t end = source.find('\n', pos);
    if (end == std::string::npos) end = source.size();
    out.append(source, pos, end - pos);
    pos = end + 1 >= source.size() ? 0 : end + 1;
    const std::size_t run = 1 + next() % (next() % 32 == 0 ? 400 : 12);
    const bool mixed = next() % 3 == 0;
    const char* one = spaces[next() % 7];
    for (std::size_t i = 0; i < run; ++i) out += mixed ? spaces[next() % 7] : one;
  }
  return out;
}

inline TokenizerCorpus build_tokenizer_corpus() {
  TokenizerCorpus c;
  std::vector<std::string> code = sorted_files("datasets", {".cpp", ".h", ".inl"});
  for (const char* dir : {"parallel", "lanes", "trainer"})
    for (const std::string& f : sorted_files(dir, {".cpp", ".h"})) code.push_back(f);
  add_files(c, "code", code, 500u << 10);
  std::vector<std::string> headers;
  for (const std::string& h : sorted_files("/usr/include", {".h"}))
    if (h.find('/', 13) == std::string::npos) headers.push_back(h);  // /usr/include/X.h only
  add_files(c, "code", headers, 900u << 10);
  add_files(c, "emoji", {"/usr/lib/python3/dist-packages/pip/_vendor/rich/_emoji_codes.py",
                         "/usr/lib/python3/dist-packages/pip/_vendor/rich/_spinners.py"}, 1u << 20);
  add_files(c, "non-Latin", sorted_files("/usr/share/vim/vim90/tutor", {".utf-8"}), 900u << 10);
  for (const char* lang : {"ru", "uk", "ja", "zh_CN", "zh_TW", "ko"})
    add_files(c, "non-Latin", sorted_files(std::string("/usr/share/man/") + lang + "/man1", {".gz"}),
              c.bytes["non-Latin"] + (60u << 10));
  const std::string jargon_file = "/usr/share/doc/jargon-text/jargon.txt.gz";
  add_files(c, "prose", {jargon_file}, 400u << 10);
  const std::string source = !headers.empty() ? read_text_file(headers.front())
                             : std::filesystem::exists(jargon_file) ? read_text_file(jargon_file).substr(0, 20000)
                                                                    : std::string("x\n");
  for (std::size_t d = 0; d < 4; ++d)
    add_document(c, "whitespace", whitespace_runs(source.substr(std::min(source.size(), d * 997)), 24u << 10));
  return c;
}

}  // namespace pipelane::test_support
