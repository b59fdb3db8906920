#include "datasets/hdf5_handle.h"

#include <cstdio>
#include <limits>

namespace pipelane::hdf5 {
namespace {

std::string join_message(const std::string& file, const std::string& object, const std::string& problem) {
  std::string message = file.empty() ? std::string("HDF5 file") : file;
  if (!object.empty()) message += ": " + object;
  return message + ": " + problem;
}

// The object's path for a message: "" for the file or its root group (the file name says it).
std::string object_for_message(hid_t object) {
  if (object < 0 || H5Iget_type(object) == H5I_FILE) return "";
  std::string name = object_name_of(object);
  return name == "/" ? "" : name;
}

std::string attribute_text(const std::string& name) { return "attribute '" + name + "'"; }

bool multiply_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* product) {
  return __builtin_mul_overflow(a, b, product);
}

// "1.5 GiB" for messages about sizes nobody reads in bytes.
std::string human_bytes(long double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 7) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0Lf %s" : "%.1Lf %s", bytes, units[unit]);
  return text;
}

Attribute open_attribute(hid_t object, const std::string& name) {
  if (!has_attribute(object, name)) fail_format(object, attribute_text(name) + " is missing");
  Attribute attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  if (!attribute.valid()) fail(object, "cannot open " + attribute_text(name));
  return attribute;
}

hssize_t attribute_points(hid_t object, const Attribute& attribute, const std::string& name) {
  Dataspace space(H5Aget_space(attribute.get()));
  if (!space.valid()) fail(object, "cannot read the shape of " + attribute_text(name));
  if (H5Sget_simple_extent_ndims(space.get()) > 1)
    fail_format(object, attribute_text(name) + " has more than one dimension");
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  if (points < 0) fail(object, "cannot read the shape of " + attribute_text(name));
  return points;
}

}  // namespace

Hdf5Error::Hdf5Error(std::string file, std::string object, std::string problem)
    : std::runtime_error(join_message(file, object, problem)),
      file_(std::move(file)),
      object_(std::move(object)),
      problem_(std::move(problem)) {}

ErrorSilencer::ErrorSilencer() {
  H5Eget_auto2(H5E_DEFAULT, &previous_function_, &previous_data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

ErrorSilencer::~ErrorSilencer() { H5Eset_auto2(H5E_DEFAULT, previous_function_, previous_data_); }

// ---- naming ----

std::string file_name_of(hid_t object) {
  if (object < 0) return "";
  const ssize_t length = H5Fget_name(object, nullptr, 0);
  if (length <= 0) return "";
  std::string name(static_cast<std::size_t>(length) + 1, '\0');
  if (H5Fget_name(object, name.data(), name.size()) < 0) return "";
  name.resize(static_cast<std::size_t>(length));
  return name;
}

std::string object_name_of(hid_t object) {
  if (object < 0) return "";
  const ssize_t length = H5Iget_name(object, nullptr, 0);
  if (length <= 0) return "";
  std::string name(static_cast<std::size_t>(length) + 1, '\0');
  if (H5Iget_name(object, name.data(), name.size()) < 0) return "";
  name.resize(static_cast<std::size_t>(length));
  return name;
}

std::string child_path(hid_t parent, const std::string& child) {
  if (!child.empty() && child.front() == '/') return child;
  std::string base = object_name_of(parent);
  if (base.empty() || base.back() != '/') base += '/';
  return base + child;
}

void fail(hid_t object, const std::string& problem) {
  throw Hdf5Error(file_name_of(object), object_for_message(object), problem);
}

void fail_format(hid_t object, const std::string& problem) {
  throw Hdf5FormatError(file_name_of(object), object_for_message(object), problem);
}

void fail_child(hid_t parent, const std::string& child, const std::string& problem) {
  throw Hdf5Error(file_name_of(parent), child_path(parent, child), problem);
}

void fail_child_format(hid_t parent, const std::string& child, const std::string& problem) {
  throw Hdf5FormatError(file_name_of(parent), child_path(parent, child), problem);
}

// ---- files ----

PropertyList file_access_properties() {
  PropertyList access = create_properties(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
  if (H5Pset_file_locking(access.get(), true, true) < 0)
    throw Hdf5Error("", "", "cannot set HDF5 file locking properties");
#endif
  return access;
}

File create_file(const std::string& path, hid_t access_properties) {
  File file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access_properties));
  if (!file.valid()) throw Hdf5Error(path, "", "cannot create an HDF5 file there");
  return file;
}

File open_file(const std::string& path, unsigned flags, hid_t access_properties) {
  File file(H5Fopen(path.c_str(), flags, access_properties));
  if (!file.valid()) throw Hdf5Error(path, "", "cannot open as HDF5 (not HDF5, truncated or damaged)");
  return file;
}

void close_file(File& file, const std::string& path) {
  if (file.close() < 0) throw Hdf5Error(path, "", "cannot finish writing (HDF5 could not flush the file)");
}

// ---- groups, datasets, properties ----

bool has_link(hid_t parent, const std::string& name) {
  // H5Lexists fails on a missing intermediate group, so walk the path one link at a time.
  if (name.empty()) return false;
  std::string prefix = name.front() == '/' ? "/" : "";
  std::size_t start = prefix.size();
  while (start < name.size()) {
    std::size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (end > start) {
      prefix += name.substr(start, end - start);
      if (H5Lexists(parent, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
      prefix += '/';
    }
    start = end + 1;
  }
  return true;
}

Group create_group(hid_t parent, const std::string& name, hid_t create_properties) {
  Group group(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, create_properties, H5P_DEFAULT));
  if (!group.valid()) fail_child(parent, name, "cannot create group");
  return group;
}

Group open_group(hid_t parent, const std::string& name) {
  if (!has_link(parent, name)) fail_child_format(parent, name, "group is missing");
  Group group(H5Gopen2(parent, name.c_str(), H5P_DEFAULT));
  if (!group.valid()) fail_child(parent, name, "cannot open as a group");
  return group;
}

Dataset open_dataset(hid_t parent, const std::string& name) {
  if (!has_link(parent, name)) fail_child_format(parent, name, "dataset is missing");
  Dataset dataset(H5Dopen2(parent, name.c_str(), H5P_DEFAULT));
  if (!dataset.valid()) fail_child(parent, name, "cannot open as a dataset");
  return dataset;
}

PropertyList create_properties(hid_t property_class) {
  PropertyList properties(H5Pcreate(property_class));
  if (!properties.valid()) throw Hdf5Error("", "", "cannot create an HDF5 property list");
  return properties;
}

Dataset create_dataset(hid_t parent, const std::string& name, hid_t file_type,
                       const std::vector<hsize_t>& dims, hid_t create_properties) {
  Dataspace space(dims.empty() ? H5Screate(H5S_SCALAR)
                               : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  if (!space.valid()) fail_child(parent, name, "cannot create its dataspace");
  Dataset dataset(H5Dcreate2(parent, name.c_str(), file_type, space.get(), H5P_DEFAULT, create_properties,
                             H5P_DEFAULT));
  if (!dataset.valid()) fail_child(parent, name, "cannot create dataset");
  return dataset;
}

void write_dataset(const Dataset& dataset, hid_t memory_type, const void* data) {
  check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), dataset.get(),
        "cannot write its data");
}

std::vector<hsize_t> dataset_dims(hid_t dataset, int max_rank) {
  Dataspace space(H5Dget_space(dataset));
  if (!space.valid()) fail(dataset, "cannot read its shape");
  const H5S_class_t kind = H5Sget_simple_extent_type(space.get());
  if (kind == H5S_NULL) return {0};  // holds nothing; one empty dimension for readers
  if (kind != H5S_SIMPLE && kind != H5S_SCALAR) fail_format(dataset, "has an unknown kind of shape");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(dataset, "cannot read its shape");
  if (rank > max_rank)
    fail_format(dataset, "has " + std::to_string(rank) + " dimensions, expected at most " +
                             std::to_string(max_rank));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    fail(dataset, "cannot read its shape");
  return dims;
}

std::uint64_t dataset_elements(hid_t dataset) {
  std::uint64_t elements = 1;
  for (hsize_t d : dataset_dims(dataset))
    if (multiply_overflows(elements, d, &elements))
      fail_format(dataset, "declares more than 2^64 values");
  return elements;
}

void check_storage_covers_extent(hid_t dataset) {
  const std::vector<hsize_t> dims = dataset_dims(dataset);
  const std::uint64_t elements = dataset_elements(dataset);
  if (elements == 0) return;
  Datatype type(H5Dget_type(dataset));
  if (!type.valid()) fail(dataset, "cannot read its type");
  const std::size_t element_bytes = H5Tget_size(type.get());
  if (element_bytes == 0) fail(dataset, "cannot read its type");
  std::uint64_t declared_bytes = 0;
  if (multiply_overflows(elements, element_bytes, &declared_bytes))
    fail_format(dataset, "declares " + std::to_string(elements) + " values of " +
                             std::to_string(element_bytes) + " bytes, more than 2^64 bytes");
  PropertyList create(H5Dget_create_plist(dataset));
  if (!create.valid()) fail(dataset, "cannot read its storage properties");
  if (H5Pget_external_count(create.get()) > 0)
    fail_format(dataset, "keeps its data in external files, which are not read");
  const std::string declared = "declares " + std::to_string(elements) + " values (" +
                               human_bytes(static_cast<long double>(declared_bytes)) + ")";
  switch (H5Pget_layout(create.get())) {
    case H5D_COMPACT:  // the data is inside the object header, all of it
      return;
    case H5D_CONTIGUOUS: {
      const hsize_t stored = H5Dget_storage_size(dataset);
      if (stored < declared_bytes)
        fail_format(dataset, declared + " but the file stores " + std::to_string(stored) + " of its " +
                                 std::to_string(declared_bytes) + " bytes (truncated, unfinished or crafted file)");
      return;
    }
    case H5D_CHUNKED: {
      std::vector<hsize_t> chunk(dims.size());
      if (dims.empty() || H5Pget_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data()) !=
                              static_cast<int>(dims.size()))
        fail(dataset, "cannot read its chunk shape");
      std::uint64_t needed = 1;
      for (std::size_t i = 0; i < dims.size(); ++i) {
        if (chunk[i] == 0) fail_format(dataset, "has a chunk dimension of 0");
        if (multiply_overflows(needed, (dims[i] + chunk[i] - 1) / chunk[i], &needed))
          fail_format(dataset, "declares more than 2^64 chunks");
      }
      hsize_t stored_chunks = 0;
      Dataspace space(H5Dget_space(dataset));  // H5S_ALL is refused here by HDF5 1.10
      if (!space.valid() || H5Dget_num_chunks(dataset, space.get(), &stored_chunks) < 0)
        fail(dataset, "cannot count its chunks");
      if (stored_chunks < needed)
        fail_format(dataset, declared + " but the file stores " + std::to_string(stored_chunks) + " of its " +
                                 std::to_string(needed) + " chunks (truncated, unfinished or crafted file)");
      return;
    }
    case H5D_VIRTUAL:
      fail_format(dataset, "is a virtual dataset (data mapped from other files), which is not read");
    default:
      fail_format(dataset, "has a storage layout this reader does not know");
  }
}

namespace detail {

std::size_t checked_read_count(hid_t dataset, hid_t memory_type, std::size_t element_bytes,
                               std::uint64_t max_elements) {
  if (H5Tget_size(memory_type) != element_bytes)
    throw std::logic_error("hdf5::read_dataset: memory type size differs from the element type");
  const std::uint64_t elements = dataset_elements(dataset);
  if (elements > max_elements)
    fail_format(dataset, "holds " + std::to_string(elements) + " values, more than the " +
                             std::to_string(max_elements) + " this reader accepts");
  check_storage_covers_extent(dataset);
  if (elements > std::numeric_limits<std::size_t>::max() / element_bytes)
    fail_allocation(dataset, elements, element_bytes);
  return static_cast<std::size_t>(elements);
}

void fail_allocation(hid_t dataset, std::size_t count, std::size_t element_bytes) {
  const long double bytes = static_cast<long double>(count) * static_cast<long double>(element_bytes);
  throw Hdf5AllocationError(file_name_of(dataset), object_for_message(dataset),
                            "cannot allocate " + human_bytes(bytes) + " to read its " +
                                std::to_string(count) + " values (out of memory)");
}

}  // namespace detail

// ---- attributes ----

bool has_attribute(hid_t object, const std::string& name) {
  return H5Aexists(object, name.c_str()) > 0;
}

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  // Variable-length UTF-8 so h5py and h5dump show plain strings.
  Datatype type(H5Tcopy(H5T_C_S1));
  if (!type.valid() || H5Tset_size(type.get(), H5T_VARIABLE) < 0 ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0)
    fail(object, "cannot make the string type for " + attribute_text(name));
  Dataspace space(H5Screate(H5S_SCALAR));
  if (!space.valid()) fail(object, "cannot make the dataspace for " + attribute_text(name));
  Attribute attribute(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attribute.valid()) fail(object, "cannot create " + attribute_text(name));
  const char* data = value.c_str();
  check(H5Awrite(attribute.get(), type.get(), &data), object, "cannot write " + attribute_text(name));
}

void write_scalar_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                            const void* value) {
  Dataspace space(H5Screate(H5S_SCALAR));
  if (!space.valid()) fail(object, "cannot make the dataspace for " + attribute_text(name));
  Attribute attribute(H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attribute.valid()) fail(object, "cannot create " + attribute_text(name));
  check(H5Awrite(attribute.get(), memory_type, value), object, "cannot write " + attribute_text(name));
}

void write_int64_attribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values) {
  const hsize_t count = values.size();
  Dataspace space(count == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr));
  if (!space.valid()) fail(object, "cannot make the dataspace for " + attribute_text(name));
  Attribute attribute(
      H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attribute.valid()) fail(object, "cannot create " + attribute_text(name));
  check(H5Awrite(attribute.get(), H5T_NATIVE_INT64, values.data()), object,
        "cannot write " + attribute_text(name));
}

std::string read_string_attribute(hid_t object, const std::string& name, std::size_t max_bytes) {
  Attribute attribute = open_attribute(object, name);
  Datatype type(H5Aget_type(attribute.get()));
  if (!type.valid()) fail(object, "cannot read the type of " + attribute_text(name));
  if (H5Tget_class(type.get()) != H5T_STRING) fail_format(object, attribute_text(name) + " is not a string");
  const hssize_t points = attribute_points(object, attribute, name);
  if (points != 1)
    fail_format(object, attribute_text(name) + " holds " + std::to_string(points) +
                            " strings, expected one");
  const std::string cannot_read = "cannot read " + attribute_text(name);
  std::string value;
  if (H5Tis_variable_str(type.get()) > 0) {
    char* data = nullptr;
    check(H5Aread(attribute.get(), type.get(), &data), object, cannot_read);
    value = data ? data : "";
    H5free_memory(data);
  } else {
    const std::size_t size = H5Tget_size(type.get());
    if (size > max_bytes)
      fail_format(object, attribute_text(name) + " is " + std::to_string(size) + " bytes long, more than " +
                              std::to_string(max_bytes));
    value.assign(size, '\0');
    check(H5Aread(attribute.get(), type.get(), value.data()), object, cannot_read);
    value.resize(std::min(value.size(), value.find('\0')));  // fixed-length strings are padded
  }
  if (value.size() > max_bytes)
    fail_format(object, attribute_text(name) + " is " + std::to_string(value.size()) +
                            " bytes long, more than " + std::to_string(max_bytes));
  return value;
}

std::int64_t read_integer_attribute(hid_t object, const std::string& name) {
  const std::vector<std::int64_t> values = read_integer_attribute_values(object, name, 1);
  if (values.size() != 1) fail_format(object, attribute_text(name) + " holds no value, expected one integer");
  return values.front();
}

std::vector<std::int64_t> read_integer_attribute_values(hid_t object, const std::string& name,
                                                        std::size_t max_count) {
  Attribute attribute = open_attribute(object, name);
  Datatype type(H5Aget_type(attribute.get()));
  if (!type.valid()) fail(object, "cannot read the type of " + attribute_text(name));
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    fail_format(object, attribute_text(name) + " is not an integer");
  const hssize_t points = attribute_points(object, attribute, name);
  if (static_cast<std::uint64_t>(points) > max_count)
    fail_format(object, attribute_text(name) + " holds " + std::to_string(points) + " values, expected " +
                            (max_count == 1 ? std::string("one") : "at most " + std::to_string(max_count)));
  std::vector<std::int64_t> values(static_cast<std::size_t>(points));
  if (points > 0)
    check(H5Aread(attribute.get(), H5T_NATIVE_INT64, values.data()), object,
          "cannot read " + attribute_text(name));
  return values;
}

}  // namespace pipelane::hdf5
