#include "datasets/token_store.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "datasets/data_error.h"
#include "datasets/hdf5_handle.h"
#include "datasets/utf8.h"

namespace pipelane {
namespace {

namespace h5 = hdf5;

// The file is readable HDF5 but not what a version-1 token store promises. Message without path.
class FormatProblem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- reading ----

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t newline = text.find('\n', pos);
    lines.push_back(text.substr(pos, newline - pos));
    if (newline == std::string::npos) break;
    pos = newline + 1;
  }
  return lines;
}

// A rank-1 integer dataset read whole, converted by HDF5 to `memory_type`. Integers wider than
// `max_file_bytes` are refused: converting them down would clip values silently.
template <typename T>
std::vector<T> read_vector(hid_t file, const std::string& name, hid_t memory_type,
                           std::size_t max_file_bytes) {
  h5::Dataset dataset = h5::open_dataset(file, name);
  h5::Datatype type(H5Dget_type(dataset.get()));
  if (!type.valid()) h5::fail(dataset.get(), "cannot read its type");
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_sign(type.get()) != H5T_SGN_NONE ||
      H5Tget_size(type.get()) > max_file_bytes)
    h5::fail_format(dataset.get(), "must hold unsigned integers of at most " +
                                       std::to_string(max_file_bytes * 8) + " bits");
  h5::dataset_dims(dataset.get(), 1);
  return h5::read_dataset<T>(dataset.get(), memory_type);
}

TokenSplit read_split(hid_t file, const std::string& name) {
  h5::open_group(file, name);  // a missing group is named as such, not by its first dataset
  TokenSplit split;
  split.tokens = read_vector<std::uint32_t>(file, name + "/tokens", H5T_NATIVE_UINT32, 4);
  split.doc_offsets = read_vector<std::uint64_t>(file, name + "/doc_offsets", H5T_NATIVE_UINT64, 8);
  return split;
}

// "OBJECT: PROBLEM" of an HDF5 failure, for a message that already starts with the path.
std::string without_file(const h5::Hdf5Error& error) {
  return error.object().empty() ? error.problem() : error.object() + ": " + error.problem();
}

}  // namespace

TokenStore TokenStore::from_splits(TokenStoreMeta meta, TokenSplit train, TokenSplit valid,
                                   const std::string& where) {
  check_token_split(train, meta.vocab_size, where + " (train)");
  check_token_split(valid, meta.vocab_size, where + " (valid)");
  TokenStore store;
  store.meta_ = std::move(meta);
  store.train_ = std::move(train);
  store.valid_ = std::move(valid);
  return store;
}

TokenStore TokenStore::open_hdf5(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(path + ": not a regular file, expected an HDF5 token file");
  const h5::ErrorSilencer quiet;

  TokenStore store;
  h5::File file;
  try {
    h5::PropertyList access = h5::file_access_properties();
    file = h5::open_file(path, H5F_ACC_RDONLY, access.get());
  } catch (const h5::Hdf5Error&) {
    throw DataError(path + ": not a readable HDF5 token file (truncated or corrupt)");
  }
  try {
    const hid_t root = file.get();
    if (!h5::has_attribute(root, "format"))
      throw FormatProblem(std::string("not a pipelane token file (no 'format' attribute, expected '") +
                          kTokenStoreFormat + "')");
    const std::string format = h5::read_string_attribute(root, "format", 4096);
    if (format != kTokenStoreFormat)
      throw FormatProblem("format is '" + printable(format) + "', expected '" + kTokenStoreFormat + "'");
    const std::int64_t version = h5::read_integer_attribute(root, "format_version");
    if (version != kTokenStoreFormatVersion)
      throw FormatProblem("format_version is " + std::to_string(version) + ", this build reads " +
                          std::to_string(kTokenStoreFormatVersion) +
                          (version > kTokenStoreFormatVersion ? " (file written by a newer pipelane)"
                                                              : ""));
    store.meta_.tokenizer = h5::read_string_attribute(root, "tokenizer", 4096);
    const std::int64_t vocab_size = h5::read_integer_attribute(root, "vocab_size");
    if (vocab_size <= 0 || vocab_size > std::int64_t{UINT32_MAX})
      throw FormatProblem("vocab_size " + std::to_string(vocab_size) +
                          " is out of range (expected 1..2^32-1)");
    store.meta_.vocab_size = static_cast<std::uint32_t>(vocab_size);
    store.meta_.sources = split_lines(h5::read_string_attribute(root, "sources"));
    if (h5::has_attribute(root, "checksum"))
      store.meta_.checksum = h5::read_string_attribute(root, "checksum", 4096);
    store.train_ = read_split(root, "/train");
    store.valid_ = read_split(root, "/valid");
  } catch (const h5::Hdf5FormatError& problem) {
    throw DataError(path + ": " + without_file(problem));
  } catch (const h5::Hdf5AllocationError& failure) {
    throw DataError(path + ": " + without_file(failure));
  } catch (const h5::Hdf5Error& failure) {
    throw DataError(path + ": not a readable HDF5 token file (truncated or corrupt: " +
                    without_file(failure) + ")");
  } catch (const FormatProblem& problem) {
    throw DataError(path + ": " + problem.what());
  }
  check_token_split(store.train_, store.meta_.vocab_size, path + " /train");
  check_token_split(store.valid_, store.meta_.vocab_size, path + " /valid");
  if (!store.meta_.checksum.empty()) {
    const std::string actual = token_store_checksum(store.train_, store.valid_);
    if (actual != store.meta_.checksum)
      throw DataError(path + ": checksum is " + actual + ", the file records " + store.meta_.checksum +
                      " (corrupt file)");
  }
  return store;
}

}  // namespace pipelane
