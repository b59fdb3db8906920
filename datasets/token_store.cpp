#include "datasets/token_store.h"

#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "datasets/data_error.h"
#include "datasets/importers.h"

namespace pipelane {
namespace {

// An HDF5 call failed. HDF5's own stack is silenced, so the caller turns this into one line that
// names the file; `what` says which step failed.
class Hdf5Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The file is readable HDF5 but not what a version-1 token store promises. Message without path.
class FormatProblem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Owns one HDF5 identifier; each kind of object has its own close function.
class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) throw Hdf5Failure(what);
  }
  H5Id(H5Id&& other) noexcept : id_(std::exchange(other.id_, -1)), close_(other.close_) {}
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id& operator=(H5Id&&) = delete;
  ~H5Id() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  // Closing a file is where buffered data reaches the disk, so its failure must be seen.
  void close_checked(const std::string& what) {
    const herr_t status = close_(std::exchange(id_, -1));
    if (status < 0) throw Hdf5Failure(what);
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t status, const std::string& what) {
  if (status < 0) throw Hdf5Failure(what);
}

// Without this HDF5 prints a page of error stack for every failed call, burying our one line.
void silence_hdf5_error_printing() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

H5Id file_access_properties() {
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create file access properties");
#if H5_VERSION_GE(1, 10, 7)
  // Keep flock-less filesystems (some NFS/Lustre mounts) usable: lock where possible, not required.
  check(H5Pset_file_locking(fapl.get(), true, true), "cannot set file locking");
#endif
  return fapl;
}

// ---- writing ----

void write_string_attribute(hid_t object, const char* name, const std::string& value) {
  // Variable-length UTF-8 so h5py and h5dump show plain strings.
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create string type");
  check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot size string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot set string charset");
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create scalar dataspace");
  H5Id attribute(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                 H5Aclose, std::string("cannot create attribute '") + name + "'");
  const char* data = value.c_str();
  check(H5Awrite(attribute.get(), type.get(), &data),
        std::string("cannot write attribute '") + name + "'");
}

void write_number_attribute(hid_t object, const char* name, hid_t file_type, hid_t memory_type,
                            const void* value) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create scalar dataspace");
  H5Id attribute(H5Acreate2(object, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                 H5Aclose, std::string("cannot create attribute '") + name + "'");
  check(H5Awrite(attribute.get(), memory_type, value),
        std::string("cannot write attribute '") + name + "'");
}

void write_vector(hid_t group, const std::string& name, hid_t file_type, hid_t memory_type,
                  const void* data, std::size_t count, std::size_t chunk_elements) {
  const hsize_t dims[1] = {count};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose, "cannot create dataspace for " + name);
  H5Id create_props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create dataset properties");
  // An empty dataset cannot be chunked (chunks must fit the fixed extent), so it stays contiguous.
  if (count > 0) {
    const hsize_t chunk[1] = {std::min<hsize_t>(count, chunk_elements)};
    check(H5Pset_chunk(create_props.get(), 1, chunk), "cannot chunk " + name);
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0)
      check(H5Pset_deflate(create_props.get(), 4), "cannot compress " + name);
  }
  H5Id dataset(H5Dcreate2(group, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                          create_props.get(), H5P_DEFAULT),
               H5Dclose, "cannot create dataset " + name);
  if (count > 0)
    check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
          "cannot write dataset " + name);
}

void write_split(hid_t file, const std::string& name, const TokenSplit& split, hid_t token_type) {
  H5Id group(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
             "cannot create group /" + name);
  write_vector(group.get(), "/" + name + "/tokens", token_type, H5T_NATIVE_UINT32,
               split.tokens.data(), split.tokens.size(), 1 << 16);
  write_vector(group.get(), "/" + name + "/doc_offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64,
               split.doc_offsets.data(), split.doc_offsets.size(), 1 << 13);
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string joined;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) joined += '\n';
    joined += lines[i];
  }
  return joined;
}

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

// ---- reading ----

bool has_link(hid_t location, const char* name) { return H5Lexists(location, name, H5P_DEFAULT) > 0; }

std::string read_string_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0)
    throw FormatProblem(std::string("missing attribute '") + name + "'");
  H5Id attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose,
                 std::string("cannot open attribute '") + name + "'");
  H5Id type(H5Aget_type(attribute.get()), H5Tclose, std::string("cannot read type of '") + name + "'");
  if (H5Tget_class(type.get()) != H5T_STRING)
    throw FormatProblem(std::string("attribute '") + name + "' is not a string");
  const std::string what = std::string("cannot read attribute '") + name + "'";
  if (H5Tis_variable_str(type.get()) > 0) {
    char* data = nullptr;
    check(H5Aread(attribute.get(), type.get(), &data), what);
    std::string value = data ? data : "";
    H5free_memory(data);
    return value;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  check(H5Aread(attribute.get(), type.get(), value.data()), what);
  value.resize(std::min(value.size(), value.find('\0')));  // fixed-length strings are padded
  return value;
}

std::int64_t read_integer_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0)
    throw FormatProblem(std::string("missing attribute '") + name + "'");
  H5Id attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose,
                 std::string("cannot open attribute '") + name + "'");
  H5Id type(H5Aget_type(attribute.get()), H5Tclose, std::string("cannot read type of '") + name + "'");
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    throw FormatProblem(std::string("attribute '") + name + "' is not an integer");
  std::int64_t value = 0;
  check(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value),
        std::string("cannot read attribute '") + name + "'");
  return value;
}

// A rank-1 integer dataset read whole, converted by HDF5 to `memory_type`. Integers wider than
// `max_file_bytes` are refused: converting them down would clip values silently.
template <typename T>
std::vector<T> read_vector(hid_t file, const std::string& name, hid_t memory_type,
                           std::size_t max_file_bytes) {
  if (!has_link(file, name.c_str())) throw FormatProblem("missing dataset " + name);
  H5Id dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open " + name);
  H5Id type(H5Dget_type(dataset.get()), H5Tclose, "cannot read type of " + name);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_sign(type.get()) != H5T_SGN_NONE ||
      H5Tget_size(type.get()) > max_file_bytes)
    throw FormatProblem(name + " must hold unsigned integers of at most " +
                        std::to_string(max_file_bytes * 8) + " bits");
  H5Id space(H5Dget_space(dataset.get()), H5Sclose, "cannot read shape of " + name);
  if (H5Sget_simple_extent_ndims(space.get()) != 1)
    throw FormatProblem(name + " must be one-dimensional");
  hsize_t count = 0;
  check(H5Sget_simple_extent_dims(space.get(), &count, nullptr), "cannot read shape of " + name);
  std::vector<T> values(count);
  if (count > 0)
    check(H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
          "cannot read " + name);
  return values;
}

TokenSplit read_split(hid_t file, const std::string& name) {
  if (!has_link(file, name.c_str())) throw FormatProblem("missing group " + name);
  TokenSplit split;
  split.tokens = read_vector<std::uint32_t>(file, name + "/tokens", H5T_NATIVE_UINT32, 4);
  split.doc_offsets = read_vector<std::uint64_t>(file, name + "/doc_offsets", H5T_NATIVE_UINT64, 8);
  return split;
}

}  // namespace

void check_token_split(const TokenSplit& split, std::uint32_t vocab_size, const std::string& where) {
  const auto& offsets = split.doc_offsets;
  if (offsets.empty() || offsets.front() != 0)
    throw DataError(where + ": doc_offsets must start with 0 (n_docs + 1 entries)");
  if (!std::is_sorted(offsets.begin(), offsets.end()))
    throw DataError(where + ": doc_offsets must never decrease");
  if (offsets.back() != split.tokens.size())
    throw DataError(where + ": doc_offsets ends at " + std::to_string(offsets.back()) +
                    ", expected the token count " + std::to_string(split.tokens.size()));
  const auto bad = std::find_if(split.tokens.begin(), split.tokens.end(),
                                [vocab_size](std::uint32_t t) { return t >= vocab_size; });
  if (bad != split.tokens.end())
    throw DataError(where + ": token id " + std::to_string(*bad) + " at position " +
                    std::to_string(bad - split.tokens.begin()) + " is >= vocab_size " +
                    std::to_string(vocab_size));
}

void write_token_store(const std::string& path, const TokenStoreMeta& meta,
                       const TokenSplit& train, const TokenSplit& valid) {
  if (meta.vocab_size == 0) throw DataError(path + ": vocab_size must be positive");
  check_token_split(train, meta.vocab_size, path + " /train");
  check_token_split(valid, meta.vocab_size, path + " /valid");
  const std::filesystem::path target(path);
  const std::filesystem::path directory = target.parent_path().empty() ? "." : target.parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec))
    throw DataError(path + ": directory " + directory.string() + " does not exist");
  silence_hdf5_error_printing();

  // Same directory as the target, so the final rename is atomic and never crosses filesystems.
  std::filesystem::path partial = target;
  partial += ".partial-" + std::to_string(::getpid());
  try {
    const hid_t token_type = meta.vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
    H5Id fapl = file_access_properties();
    H5Id file(H5Fcreate(partial.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
              "cannot create " + partial.string());
    write_string_attribute(file.get(), "format", kTokenStoreFormat);
    const int version = kTokenStoreFormatVersion;
    write_number_attribute(file.get(), "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
    write_string_attribute(file.get(), "tokenizer", meta.tokenizer);
    write_number_attribute(file.get(), "vocab_size", H5T_STD_U32LE, H5T_NATIVE_UINT32,
                           &meta.vocab_size);
    write_string_attribute(file.get(), "sources", join_lines(meta.sources));
    write_string_attribute(file.get(), "checksum", token_store_checksum(train, valid));
    write_split(file.get(), "train", train, token_type);
    write_split(file.get(), "valid", valid, token_type);
    file.close_checked("cannot finish writing " + partial.string());
    std::filesystem::rename(partial, target);
  } catch (const Hdf5Failure& failure) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    throw DataError(path + ": cannot write token file (" + failure.what() + ")");
  } catch (const std::filesystem::filesystem_error& failure) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    throw DataError(path + ": cannot move the finished file into place (" +
                    failure.code().message() + ")");
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    throw;
  }
}

std::string token_store_checksum(const TokenSplit& train, const TokenSplit& valid) {
  // Little-endian words hashed through a small buffer, so the value is the same on every host.
  uLong crc = crc32(0L, Z_NULL, 0);
  unsigned char buffer[8 * 1024];
  std::size_t used = 0;
  auto put = [&](std::uint64_t value, int bytes) {
    if (used + 8 > sizeof buffer) {
      crc = crc32(crc, buffer, static_cast<uInt>(used));
      used = 0;
    }
    for (int i = 0; i < bytes; ++i) buffer[used++] = static_cast<unsigned char>(value >> (8 * i));
  };
  for (const TokenSplit* split : {&train, &valid}) {
    for (std::uint32_t t : split->tokens) put(t, 4);
    for (std::uint64_t o : split->doc_offsets) put(o, 8);
  }
  crc = crc32(crc, buffer, static_cast<uInt>(used));
  char text[16];
  std::snprintf(text, sizeof text, "%08lx", static_cast<unsigned long>(crc));
  return std::string("crc32:") + text;
}

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

TokenStore TokenStore::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !is_imported_format(path))
    throw DataError(path + ": no such file (run 'pipelane prepare-data' first)");
  if (is_imported_format(path)) return import_token_file(path);
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(path + ": not a regular file, expected an HDF5 token file");
  silence_hdf5_error_printing();

  TokenStore store;
  try {
    H5Id fapl = file_access_properties();
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, "");
    const hid_t root = file.get();

    if (H5Aexists(root, "format") <= 0)
      throw FormatProblem(std::string("not a pipelane token file (no 'format' attribute, expected '") +
                          kTokenStoreFormat + "')");
    const std::string format = read_string_attribute(root, "format");
    if (format != kTokenStoreFormat)
      throw FormatProblem("format is '" + format + "', expected '" + kTokenStoreFormat + "'");
    const std::int64_t version = read_integer_attribute(root, "format_version");
    if (version != kTokenStoreFormatVersion)
      throw FormatProblem("format_version is " + std::to_string(version) + ", this build reads " +
                          std::to_string(kTokenStoreFormatVersion) +
                          (version > kTokenStoreFormatVersion ? " (file written by a newer pipelane)"
                                                              : ""));
    store.meta_.tokenizer = read_string_attribute(root, "tokenizer");
    const std::int64_t vocab_size = read_integer_attribute(root, "vocab_size");
    if (vocab_size <= 0 || vocab_size > std::int64_t{UINT32_MAX})
      throw FormatProblem("vocab_size " + std::to_string(vocab_size) +
                          " is out of range (expected 1..2^32-1)");
    store.meta_.vocab_size = static_cast<std::uint32_t>(vocab_size);
    store.meta_.sources = split_lines(read_string_attribute(root, "sources"));
    if (H5Aexists(root, "checksum") > 0) store.meta_.checksum = read_string_attribute(root, "checksum");
    store.train_ = read_split(root, "/train");
    store.valid_ = read_split(root, "/valid");
  } catch (const Hdf5Failure& failure) {
    const std::string detail = failure.what();
    throw DataError(path + ": not a readable HDF5 token file (truncated or corrupt" +
                    (detail.empty() ? "" : ": " + detail) + ")");
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
