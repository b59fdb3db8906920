#include "datasets/token_store_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "datasets/data_error.h"
#include "datasets/hdf5_handle.h"
#include "datasets/token_split.h"

namespace pipelane {
namespace {

namespace h5 = hdf5;

constexpr hsize_t kTokenChunk = hsize_t{1} << 16;  // elements per HDF5 chunk
constexpr hsize_t kOffsetChunk = hsize_t{1} << 13;
constexpr std::size_t kFlushTokens = std::size_t{1} << 18;  // buffered before a write (4 chunks)
constexpr std::size_t kFlushOffsets = std::size_t{1} << 16;

// One extendible 1-D dataset written by appending.
struct GrowingDataset {
  h5::Dataset dataset;
  hsize_t size = 0;

  void append(hid_t memory_type, const void* data, hsize_t count) {
    if (count == 0) return;
    const hsize_t new_size = size + count;
    h5::check(H5Dset_extent(dataset.get(), &new_size), dataset.get(),
              "cannot grow to " + std::to_string(new_size));
    h5::Dataspace file_space(H5Dget_space(dataset.get()));
    if (!file_space.valid()) h5::fail(dataset.get(), "cannot read its shape");
    h5::check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &size, nullptr, &count, nullptr),
              dataset.get(), "cannot select where to append");
    h5::Dataspace memory_space(H5Screate_simple(1, &count, nullptr));
    if (!memory_space.valid()) h5::fail(dataset.get(), "cannot make a dataspace to append");
    h5::check(H5Dwrite(dataset.get(), memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data),
              dataset.get(), "cannot append " + std::to_string(count) + " values");
    size = new_size;
  }
};

GrowingDataset create_growing(hid_t group, const std::string& name, hid_t file_type, hsize_t chunk) {
  h5::PropertyList create = h5::create_properties(H5P_DATASET_CREATE);
  h5::check(H5Pset_chunk(create.get(), 1, &chunk), group, "cannot chunk " + name);
  if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0)
    h5::check(H5Pset_deflate(create.get(), 4), group, "cannot compress " + name);
  const hsize_t empty = 0, unlimited = H5S_UNLIMITED;
  h5::Dataspace space(H5Screate_simple(1, &empty, &unlimited));
  if (!space.valid()) h5::fail_child(group, name, "cannot create its dataspace");
  h5::Dataset dataset(
      H5Dcreate2(group, name.c_str(), file_type, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT));
  if (!dataset.valid()) h5::fail_child(group, name, "cannot create dataset");
  return GrowingDataset{std::move(dataset), 0};
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string joined;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) joined += '\n';
    joined += lines[i];
  }
  return joined;
}

}  // namespace

struct TokenStoreWriter::State {
  struct SplitState {
    h5::Group group;
    GrowingDataset tokens, offsets;
    std::vector<std::uint32_t> token_buffer;
    std::vector<std::uint64_t> offset_buffer;
    std::uint64_t token_count = 0, document_count = 0;
  };
  std::string path;
  std::filesystem::path partial;
  TokenStoreMeta meta;
  h5::ErrorSilencer quiet;
  h5::File file;
  SplitState splits[2];
  TokenChecksum checksum;
  bool finished = false;

  void flush_tokens(int s) {
    SplitState& split = splits[s];
    split.tokens.append(H5T_NATIVE_UINT32, split.token_buffer.data(), split.token_buffer.size());
    split.token_buffer.clear();
  }
  void flush_offsets(int s) {
    SplitState& split = splits[s];
    split.offsets.append(H5T_NATIVE_UINT64, split.offset_buffer.data(), split.offset_buffer.size());
    split.offset_buffer.clear();
  }
  void close_objects() {
    for (SplitState& split : splits) {
      split.tokens.dataset.close();
      split.offsets.dataset.close();
      split.group.close();
    }
  }
  // Closes everything and removes the temporary file (after a failure).
  void abandon() {
    close_objects();
    file.close();
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
  }
  // Runs `write`, turning HDF5 failures into one DataError naming the token file.
  template <typename Write>
  void guarded(Write&& write) {
    try {
      write();
    } catch (const h5::Hdf5Error& failure) {
      throw DataError(path + ": cannot write token file (" + failure.what() + ")");
    }
  }
};

TokenStoreWriter::TokenStoreWriter(std::string path, TokenStoreMeta meta) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = std::move(path);
  s.meta = std::move(meta);
  if (s.meta.vocab_size == 0) throw DataError(s.path + ": vocab_size must be positive");
  const std::filesystem::path target(s.path);
  const std::filesystem::path directory = target.parent_path().empty() ? "." : target.parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec))
    throw DataError(s.path + ": directory " + directory.string() + " does not exist");
  // Same directory as the target, so the final rename is atomic and never crosses filesystems.
  s.partial = target;
  s.partial += ".partial-" + std::to_string(::getpid());
  try {
    s.guarded([&] { create_layout(s); });
  } catch (...) {
    s.abandon();
    throw;
  }
}

void TokenStoreWriter::create_layout(State& s) {
  h5::PropertyList access = h5::file_access_properties();
  s.file = h5::create_file(s.partial.string(), access.get());
  const hid_t root = s.file.get();
  h5::write_string_attribute(root, "format", kTokenStoreFormat);
  const int version = kTokenStoreFormatVersion;
  h5::write_scalar_attribute(root, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
  h5::write_string_attribute(root, "tokenizer", s.meta.tokenizer);
  h5::write_scalar_attribute(root, "vocab_size", H5T_STD_U32LE, H5T_NATIVE_UINT32, &s.meta.vocab_size);
  h5::write_string_attribute(root, "sources", join_lines(s.meta.sources));
  const hid_t token_type = s.meta.vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
  const char* names[2] = {"train", "valid"};
  for (int i = 0; i < 2; ++i) {
    State::SplitState& split = s.splits[i];
    split.group = h5::create_group(root, names[i]);
    split.tokens = create_growing(split.group.get(), "tokens", token_type, kTokenChunk);
    split.offsets = create_growing(split.group.get(), "doc_offsets", H5T_STD_U64LE, kOffsetChunk);
    split.offset_buffer.push_back(0);
    s.checksum.add_offsets(i, split.offset_buffer);
  }
}

TokenStoreWriter::~TokenStoreWriter() {
  if (!state_->finished) state_->abandon();
}

void TokenStoreWriter::append(Split which, std::span<const std::uint32_t> tokens) {
  State& s = *state_;
  const int i = static_cast<int>(which);
  State::SplitState& split = s.splits[i];
  const std::size_t bad = first_out_of_vocab(tokens, s.meta.vocab_size);
  if (bad != tokens.size())
    throw DataError(s.path + ": token id " + std::to_string(tokens[bad]) + " is >= vocab_size " +
                    std::to_string(s.meta.vocab_size));
  s.checksum.add_tokens(i, tokens);
  split.token_buffer.insert(split.token_buffer.end(), tokens.begin(), tokens.end());
  split.token_count += tokens.size();
  if (split.token_buffer.size() >= kFlushTokens) s.guarded([&] { s.flush_tokens(i); });
}

void TokenStoreWriter::end_document(Split which) {
  State& s = *state_;
  const int i = static_cast<int>(which);
  State::SplitState& split = s.splits[i];
  split.offset_buffer.push_back(split.token_count);
  s.checksum.add_offsets(i, std::span<const std::uint64_t>(&split.offset_buffer.back(), 1));
  ++split.document_count;
  if (split.offset_buffer.size() >= kFlushOffsets) s.guarded([&] { s.flush_offsets(i); });
}

void TokenStoreWriter::finish() {
  State& s = *state_;
  s.guarded([&] {
    for (int i = 0; i < 2; ++i) {
      s.flush_tokens(i);
      s.flush_offsets(i);
    }
    h5::write_string_attribute(s.file.get(), "checksum", s.checksum.text());
    s.close_objects();
    h5::close_file(s.file, s.partial.string());
  });
  std::error_code ec;
  std::filesystem::rename(s.partial, s.path, ec);
  if (ec) throw DataError(s.path + ": cannot move the finished file into place (" + ec.message() + ")");
  s.finished = true;
}

std::uint64_t TokenStoreWriter::tokens(Split split) const {
  return state_->splits[static_cast<int>(split)].token_count;
}

std::uint64_t TokenStoreWriter::documents(Split split) const {
  return state_->splits[static_cast<int>(split)].document_count;
}

void write_token_store(const std::string& path, const TokenStoreMeta& meta, const TokenSplit& train,
                       const TokenSplit& valid) {
  if (meta.vocab_size == 0) throw DataError(path + ": vocab_size must be positive");
  check_token_split(train, meta.vocab_size, path + " /train");
  check_token_split(valid, meta.vocab_size, path + " /valid");
  TokenStoreWriter writer(path, meta);
  const auto write = [&writer](TokenStoreWriter::Split which, const TokenSplit& split) {
    const std::span<const std::uint32_t> tokens(split.tokens);
    for (std::size_t d = 0; d + 1 < split.doc_offsets.size(); ++d) {
      writer.append(which, tokens.subspan(split.doc_offsets[d], split.doc_offsets[d + 1] - split.doc_offsets[d]));
      writer.end_document(which);
    }
  };
  write(TokenStoreWriter::Split::kTrain, train);
  write(TokenStoreWriter::Split::kValid, valid);
  writer.finish();
}

}  // namespace pipelane
