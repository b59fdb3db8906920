// Small RAII wrappers over HDF5 identifiers, and helpers whose every failure is one exception whose
// message names the file and the object ("data/x.h5: /train/tokens: cannot read"). Used by the
// token store and by checkpoints; depends on nothing but HDF5 and the standard library.
//
// Files are untrusted: readers check what HDF5 reports (element counts of attributes, rank and
// extent of datasets, whether the stored data covers the declared extent) before they allocate or
// read, and an allocation that still fails is reported with the file and object it was for.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pipelane::hdf5 {

// An HDF5 step failed. what() is "FILE: OBJECT: PROBLEM" ("FILE: PROBLEM" for the file itself).
class Hdf5Error : public std::runtime_error {
 public:
  Hdf5Error(std::string file, std::string object, std::string problem);
  const std::string& file() const { return file_; }
  const std::string& object() const { return object_; }  // "" when the file itself failed
  const std::string& problem() const { return problem_; }

 private:
  std::string file_, object_, problem_;
};

// The file is readable HDF5 but an object is missing or not what the reader expects (wrong type
// or shape, fewer bytes stored than declared, more than the reader accepts).
class Hdf5FormatError : public Hdf5Error {
 public:
  using Hdf5Error::Hdf5Error;
};

// Memory for data read from the file could not be allocated (the message says how much).
class Hdf5AllocationError : public Hdf5Error {
 public:
  using Hdf5Error::Hdf5Error;
};

// While alive, HDF5 prints nothing for a failed call on this thread (otherwise it prints a page of
// error stack per failure and buries the one line we report). Restores the previous handler.
class ErrorSilencer {
 public:
  ErrorSilencer();
  ~ErrorSilencer();
  ErrorSilencer(const ErrorSilencer&) = delete;
  ErrorSilencer& operator=(const ErrorSilencer&) = delete;

 private:
  H5E_auto2_t previous_function_ = nullptr;
  void* previous_data_ = nullptr;
};

// Owns one identifier; `Close` is the close function of its kind. A negative id is "none".
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, -1);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and returns HDF5's status (a file's close is where buffered data reaches the disk).
  herr_t close() { return id_ >= 0 ? Close(std::exchange(id_, -1)) : 0; }

 private:
  void reset() {
    if (id_ >= 0) Close(std::exchange(id_, -1));
  }
  hid_t id_ = -1;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;  // only for types made by copy/get, never predefined ones
using Attribute = Handle<H5Aclose>;
using PropertyList = Handle<H5Pclose>;

// ---- naming ----

std::string file_name_of(hid_t object);    // "" when HDF5 cannot say
std::string object_name_of(hid_t object);  // "/train/tokens"; "" for the file (root) itself
// `child` inside `parent`, as a path ("/train" + "tokens" -> "/train/tokens"; absolute stays).
std::string child_path(hid_t parent, const std::string& child);

// Throw naming the file and object of `object` (any id inside a file, or the file itself).
[[noreturn]] void fail(hid_t object, const std::string& problem);
[[noreturn]] void fail_format(hid_t object, const std::string& problem);
// The same for an object that does not exist or could not be opened: `child` inside `parent`.
[[noreturn]] void fail_child(hid_t parent, const std::string& child, const std::string& problem);
[[noreturn]] void fail_child_format(hid_t parent, const std::string& child, const std::string& problem);
inline void check(herr_t status, hid_t object, const std::string& problem) {
  if (status < 0) fail(object, problem);
}

// ---- files ----

// File access properties that lock the file where the filesystem can, without requiring it (some
// NFS/Lustre mounts have no flock).
PropertyList file_access_properties();
File create_file(const std::string& path, hid_t access_properties = H5P_DEFAULT);  // truncates
File open_file(const std::string& path, unsigned flags = H5F_ACC_RDONLY,
               hid_t access_properties = H5P_DEFAULT);
// Closes and throws if HDF5 could not flush the file.
void close_file(File& file, const std::string& path);

// ---- groups, datasets, properties ----

bool has_link(hid_t parent, const std::string& name);  // false also for a missing intermediate group
Group create_group(hid_t parent, const std::string& name, hid_t create_properties = H5P_DEFAULT);
Group open_group(hid_t parent, const std::string& name);      // Hdf5FormatError when missing
Dataset open_dataset(hid_t parent, const std::string& name);  // Hdf5FormatError when missing
PropertyList create_properties(hid_t property_class);  // H5P_DATASET_CREATE, H5P_GROUP_CREATE, ...
Dataset create_dataset(hid_t parent, const std::string& name, hid_t file_type,
                       const std::vector<hsize_t>& dims, hid_t create_properties = H5P_DEFAULT);
void write_dataset(const Dataset& dataset, hid_t memory_type, const void* data);

// The extent (one entry per dimension); Hdf5FormatError unless a simple dataspace of rank <= max_rank.
std::vector<hsize_t> dataset_dims(hid_t dataset, int max_rank = H5S_MAX_RANK);
// Product of the dims; Hdf5FormatError if it does not fit in 64 bits.
std::uint64_t dataset_elements(hid_t dataset);
// Hdf5FormatError unless the data of every element of the extent is in the file: contiguous
// storage at least as large as declared, every chunk of a chunked layout allocated, no external
// files. A dataset declaring 2^28 values and storing none would otherwise read as 2^28 fill values.
void check_storage_covers_extent(hid_t dataset);

// All elements of `dataset`, converted by HDF5 to `memory_type` (which must match sizeof(T)), after
// check_storage_covers_extent. Hdf5FormatError when there are more than `max_elements`; an
// allocation that fails is an Hdf5AllocationError naming the file, the object and the size.
template <typename T>
std::vector<T> read_dataset(hid_t dataset, hid_t memory_type, std::uint64_t max_elements = UINT64_MAX);

// ---- attributes ----

bool has_attribute(hid_t object, const std::string& name);
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
// A scalar attribute of `file_type` holding *value (of `memory_type`).
void write_scalar_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                            const void* value);
// int64 values: a scalar for one value, a 1-D attribute otherwise.
void write_int64_attribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values);

// Variable- or fixed-length string; Hdf5FormatError when missing, not one string, or longer than
// max_bytes.
std::string read_string_attribute(hid_t object, const std::string& name,
                                  std::size_t max_bytes = std::size_t{1} << 30);
// One integer (scalar or a single element); Hdf5FormatError when missing, not an integer, or not
// exactly one value.
std::int64_t read_integer_attribute(hid_t object, const std::string& name);
// Integers of a scalar or 1-D attribute; Hdf5FormatError when missing, not integers, or more than
// max_count values.
std::vector<std::int64_t> read_integer_attribute_values(hid_t object, const std::string& name,
                                                        std::size_t max_count);

// ---- implementation of the template ----

namespace detail {
// What read_dataset allocates for; throws as documented there.
std::size_t checked_read_count(hid_t dataset, hid_t memory_type, std::size_t element_bytes,
                               std::uint64_t max_elements);
[[noreturn]] void fail_allocation(hid_t dataset, std::size_t count, std::size_t element_bytes);
}  // namespace detail

template <typename T>
std::vector<T> read_dataset(hid_t dataset, hid_t memory_type, std::uint64_t max_elements) {
  const std::size_t count = detail::checked_read_count(dataset, memory_type, sizeof(T), max_elements);
  std::vector<T> values;
  try {
    values.resize(count);
  } catch (const std::bad_alloc&) {
    detail::fail_allocation(dataset, count, sizeof(T));
  } catch (const std::length_error&) {
    detail::fail_allocation(dataset, count, sizeof(T));
  }
  if (count > 0)
    check(H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), dataset,
          "cannot read its data");
  return values;
}

}  // namespace pipelane::hdf5
