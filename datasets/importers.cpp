#include "datasets/importers.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "datasets/data_error.h"
#include "datasets/gpt2_tokenizer.h"

namespace pipelane {
namespace {

constexpr std::uint32_t kGpt2Vocab = 50257;

std::string read_binary(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw DataError(path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw DataError(path + ": cannot read");
  return bytes;
}

// Reads little-endian integers from a byte buffer, with the offset in every error.
class Cursor {
 public:
  Cursor(const std::string& bytes, const std::string& path) : bytes_(bytes), path_(path) {}
  template <typename T>
  T get(const char* what) {
    if (pos_ + sizeof(T) > bytes_.size())
      throw DataError(path_ + ": truncated at byte " + std::to_string(pos_) + " reading " + what +
                      " (file has " + std::to_string(bytes_.size()) + " bytes)");
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));  // the formats are little-endian, as x86
    pos_ += sizeof(T);
    return value;
  }
  std::size_t pos() const { return pos_; }

 private:
  const std::string& bytes_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

std::uint32_t token_at(const std::string& bin, std::size_t offset, int dtype) {
  const char* p = bin.data() + offset;
  switch (dtype) {
    case 1: return static_cast<std::uint8_t>(*p);
    case 2: { std::int8_t v; std::memcpy(&v, p, 1); return static_cast<std::uint32_t>(static_cast<std::int32_t>(v)); }
    case 3: { std::int16_t v; std::memcpy(&v, p, 2); return static_cast<std::uint32_t>(static_cast<std::int32_t>(v)); }
    case 4: { std::int32_t v; std::memcpy(&v, p, 4); return static_cast<std::uint32_t>(v); }
    case 5: { std::int64_t v; std::memcpy(&v, p, 8); return v < 0 || v > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(v); }
    default: { std::uint16_t v; std::memcpy(&v, p, 2); return v; }
  }
}

std::string with_extension(const std::string& path, const char* ext) {
  return std::filesystem::path(path).replace_extension(ext).string();
}

void check_vocab(const ImportedTokens& t, const std::string& path) {
  for (std::size_t i = 0; i < t.all.tokens.size(); ++i)
    if (t.all.tokens[i] >= t.meta.vocab_size)
      throw DataError(path + ": token id " + std::to_string(static_cast<std::int64_t>(t.all.tokens[i])) +
                      " at token " + std::to_string(i) + " is outside the " + t.meta.tokenizer +
                      " vocabulary (expected < " + std::to_string(t.meta.vocab_size) + ")");
}

}  // namespace

bool is_held_out_document(std::size_t index, double valid_fraction) {
  return std::floor(static_cast<double>(index + 1) * valid_fraction) >
         std::floor(static_cast<double>(index) * valid_fraction);
}

bool is_imported_format(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".idx" || ext == ".bin";
}

ImportedTokens read_megatron_dataset(const std::string& path) {
  const std::string idx_path = with_extension(path, ".idx"), bin_path = with_extension(path, ".bin");
  const std::string idx = read_binary(idx_path);
  Cursor c(idx, idx_path);
  char magic[9];
  for (char& m : magic) m = c.get<char>("the magic");
  if (std::memcmp(magic, "MMIDIDX\0\0", 9) != 0)
    throw DataError(idx_path + ": not a Megatron-LM index (expected magic MMIDIDX at byte 0)");
  const auto version = c.get<std::uint64_t>("the version");
  if (version != 1)
    throw DataError(idx_path + ": index version " + std::to_string(version) + ", expected 1");
  const int dtype = c.get<std::uint8_t>("the dtype code");
  static const int kSize[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
  if (dtype < 1 || dtype > 8 || dtype == 6 || dtype == 7)
    throw DataError(idx_path + ": dtype code " + std::to_string(dtype) +
                    " at byte 9 is not an integer token type (expected 1-5 or 8)");
  const std::size_t item = kSize[dtype];
  const auto sequences = c.get<std::uint64_t>("the sequence count");
  const auto documents = c.get<std::uint64_t>("the document count");
  const std::size_t needed = c.pos() + sequences * 12 + documents * 8;
  if (sequences > idx.size() || documents > idx.size() || idx.size() < needed)
    throw DataError(idx_path + ": truncated: " + std::to_string(sequences) + " sequences and " +
                    std::to_string(documents) + " documents need " + std::to_string(needed) +
                    " bytes, the file has " + std::to_string(idx.size()));
  std::vector<std::int32_t> lengths(sequences);
  for (auto& l : lengths) l = c.get<std::int32_t>("a sequence length");
  std::vector<std::int64_t> pointers(sequences);
  for (auto& p : pointers) p = c.get<std::int64_t>("a sequence pointer");
  std::int64_t previous_doc = -1;
  for (std::uint64_t d = 0; d < documents; ++d) {
    const auto doc = c.get<std::int64_t>("a document index");
    if (doc < previous_doc || doc > static_cast<std::int64_t>(sequences))
      throw DataError(idx_path + ": document index " + std::to_string(d) + " = " + std::to_string(doc) +
                      " is out of order or past the " + std::to_string(sequences) + " sequences");
    previous_doc = doc;
  }

  const std::string bin = read_binary(bin_path);
  ImportedTokens out{{Gpt2Tokenizer::kName, kGpt2Vocab, {bin_path}, ""}, {{}, {0}}};
  std::int64_t expected_pointer = 0;
  for (std::uint64_t s = 0; s < sequences; ++s) {
    if (lengths[s] < 0 || pointers[s] != expected_pointer)
      throw DataError(idx_path + ": sequence " + std::to_string(s) + " has length " + std::to_string(lengths[s]) +
                      " and pointer " + std::to_string(pointers[s]) + ", expected a length >= 0 and pointer " +
                      std::to_string(expected_pointer));
    const std::uint64_t end = static_cast<std::uint64_t>(pointers[s]) + static_cast<std::uint64_t>(lengths[s]) * item;
    if (end > bin.size())
      throw DataError(bin_path + ": truncated: sequence " + std::to_string(s) + " ends at byte " +
                      std::to_string(end) + ", the file has " + std::to_string(bin.size()) + " bytes");
    for (std::uint64_t off = static_cast<std::uint64_t>(pointers[s]); off < end; off += item)
      out.all.tokens.push_back(token_at(bin, off, dtype));
    out.all.doc_offsets.push_back(out.all.tokens.size());
    expected_pointer = static_cast<std::int64_t>(end);
  }
  check_vocab(out, bin_path);
  return out;
}

ImportedTokens read_llmc_shard(const std::string& path) {
  const std::string bytes = read_binary(path);
  Cursor c(bytes, path);
  std::int32_t header[256];
  for (auto& h : header) h = c.get<std::int32_t>("the 256-int header");
  if (header[0] != static_cast<std::int32_t>(kLlmcMagic))
    throw DataError(path + ": not an llm.c token shard (magic " + std::to_string(header[0]) +
                    " at byte 0, expected " + std::to_string(kLlmcMagic) + ")");
  if (header[1] != 1 && header[1] != 2)
    throw DataError(path + ": llm.c shard version " + std::to_string(header[1]) + ", expected 1 or 2");
  const std::size_t item = header[1] == 1 ? 2 : 4;
  const auto count = static_cast<std::uint64_t>(static_cast<std::uint32_t>(header[2]));
  if (bytes.size() != 1024 + count * item)
    throw DataError(path + ": header says " + std::to_string(count) + " tokens (" +
                    std::to_string(1024 + count * item) + " bytes), the file has " +
                    std::to_string(bytes.size()) + " bytes (truncated or corrupt)");
  ImportedTokens out;
  // Version 2 is llm.c's LLaMA 3 data: 128256 ids, documents start with <|begin_of_text|>.
  const bool gpt2 = header[1] == 1;
  out.meta = {gpt2 ? Gpt2Tokenizer::kName : "llama3", gpt2 ? kGpt2Vocab : 128256u, {path}, ""};
  const std::uint32_t doc_start = gpt2 ? Gpt2Tokenizer::kEndOfText : 128000u;
  out.all.doc_offsets = {0};
  out.all.tokens.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint32_t t = 0;
    std::memcpy(&t, bytes.data() + 1024 + i * item, item);
    if (t == doc_start && i > 0) out.all.doc_offsets.push_back(i);
    out.all.tokens.push_back(t);
  }
  out.all.doc_offsets.push_back(count);
  if (count == 0) out.all.doc_offsets = {0};
  check_vocab(out, path);
  return out;
}

ImportedTokens read_imported(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  std::error_code ec;
  if (ext == ".idx" || std::filesystem::exists(with_extension(path, ".idx"), ec))
    return read_megatron_dataset(path);
  return read_llmc_shard(path);
}

void split_documents_by_fraction(const TokenSplit& all, double valid_fraction, TokenSplit& train,
                                 TokenSplit& valid) {
  train = {{}, {0}};
  valid = {{}, {0}};
  for (std::size_t d = 0; d + 1 < all.doc_offsets.size(); ++d) {
    TokenSplit& to = is_held_out_document(d, valid_fraction) ? valid : train;
    to.tokens.insert(to.tokens.end(), all.tokens.begin() + static_cast<std::ptrdiff_t>(all.doc_offsets[d]),
                     all.tokens.begin() + static_cast<std::ptrdiff_t>(all.doc_offsets[d + 1]));
    to.doc_offsets.push_back(to.tokens.size());
  }
}

TokenStore import_token_file(const std::string& path) {
  ImportedTokens imported = read_imported(path);
  if (imported.all.tokens.empty()) throw DataError(path + ": holds no tokens");
  TokenSplit train, valid;
  split_documents_by_fraction(imported.all, kImportValidFraction, train, valid);
  return TokenStore::from_splits(std::move(imported.meta), std::move(train), std::move(valid), path);
}

}  // namespace pipelane
