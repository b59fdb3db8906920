#include "datasets/hdf5_handle.h"

#include <gtest/gtest.h>

#include "tests/datasets/test_files.h"

namespace pipelane::hdf5 {
namespace {

using test_support::TempDir;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the Hdf5Error (or subclass E) that `action` throws; a failure when none is thrown.
template <typename E = Hdf5Error, typename Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const E& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

ssize_t open_objects() { return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); }

// A 1-D dataset of `count` uint16 values whose data is never written; chunked or contiguous.
void declare_unwritten(hid_t parent, const std::string& name, hsize_t count, bool chunked) {
  PropertyList create = create_properties(H5P_DATASET_CREATE);
  if (chunked) {
    const hsize_t chunk = 1 << 16;
    ASSERT_GE(H5Pset_chunk(create.get(), 1, &chunk), 0);
  }
  create_dataset(parent, name, H5T_STD_U16LE, {count}, create.get());
}

TEST(Hdf5Handle, HandlesCloseWhatTheyOwnAndMoveOwnership) {
  TempDir dir;
  const ErrorSilencer quiet;
  const ssize_t before = open_objects();
  {
    File file = create_file(dir.file("a.h5"));
    Group group = create_group(file.get(), "g");
    Group moved = std::move(group);
    EXPECT_FALSE(group.valid());
    EXPECT_TRUE(moved.valid());
    EXPECT_EQ(open_objects(), before + 2);
  }
  EXPECT_EQ(open_objects(), before);
}

TEST(Hdf5Handle, SilencerKeepsStderrCleanAndRestoresThePreviousHandler) {
  TempDir dir;
  test_support::write_file(dir.file("junk.h5"), "not hdf5 at all");
  H5E_auto2_t before_function = nullptr;
  void* before_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &before_function, &before_data);
  ::testing::internal::CaptureStderr();
  {
    const ErrorSilencer quiet;
    const std::string message = error_of([&] { open_file(dir.file("junk.h5")); });
    EXPECT_EQ(message.rfind(dir.file("junk.h5") + ": cannot open as HDF5", 0), 0u) << message;
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  H5E_auto2_t after_function = nullptr;
  void* after_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &after_function, &after_data);
  EXPECT_EQ(after_function, before_function);
  EXPECT_EQ(after_data, before_data);
}

TEST(Hdf5Handle, MissingObjectsAreFormatErrorsNamingFileAndObject) {
  TempDir dir;
  const ErrorSilencer quiet;
  const std::string path = dir.file("a.h5");
  File file = create_file(path);
  Group group = create_group(file.get(), "train");
  EXPECT_EQ(error_of<Hdf5FormatError>([&] { open_dataset(group.get(), "tokens"); }),
            path + ": /train/tokens: dataset is missing");
  EXPECT_EQ(error_of<Hdf5FormatError>([&] { open_group(file.get(), "/no/such/group"); }),
            path + ": /no/such/group: group is missing");
  EXPECT_EQ(error_of<Hdf5FormatError>([&] { read_string_attribute(file.get(), "format"); }),
            path + ": attribute 'format' is missing");
  EXPECT_EQ(error_of<Hdf5FormatError>([&] { read_integer_attribute(group.get(), "n"); }),
            path + ": /train: attribute 'n' is missing");
}

TEST(Hdf5Handle, AttributesRoundTripAndWrongShapesAreRefusedBeforeReading) {
  TempDir dir;
  const ErrorSilencer quiet;
  const std::string path = dir.file("a.h5");
  File file = create_file(path);
  const hid_t root = file.get();
  write_string_attribute(root, "name", "tokens");
  write_int64_attribute(root, "one", {42});
  write_int64_attribute(root, "three", {1, -2, 3});
  EXPECT_EQ(read_string_attribute(root, "name"), "tokens");
  EXPECT_EQ(read_integer_attribute(root, "one"), 42);
  EXPECT_EQ(read_integer_attribute_values(root, "three", 3), (std::vector<std::int64_t>{1, -2, 3}));
  // Reading three values into room for one would write past it: refused from the shape.
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { read_integer_attribute(root, "three"); }),
                       "attribute 'three' holds 3 values, expected one"));
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { read_integer_attribute_values(root, "three", 2); }),
                       "attribute 'three' holds 3 values, expected at most 2"));
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { read_integer_attribute(root, "name"); }),
                       "attribute 'name' is not an integer"));
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { read_string_attribute(root, "one"); }),
                       "attribute 'one' is not a string"));
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { read_string_attribute(root, "name", 3); }),
                       "attribute 'name' is 6 bytes long, more than 3"));
}

TEST(Hdf5Handle, DatasetsRoundTripWithTheirShape) {
  TempDir dir;
  const ErrorSilencer quiet;
  File file = create_file(dir.file("a.h5"));
  const std::vector<float> values{1, 2, 3, 4, 5, 6};
  Dataset written = create_dataset(file.get(), "m", H5T_IEEE_F32LE, {2, 3});
  write_dataset(written, H5T_NATIVE_FLOAT, values.data());
  Dataset dataset = open_dataset(file.get(), "m");
  EXPECT_EQ(dataset_dims(dataset.get()), (std::vector<hsize_t>{2, 3}));
  EXPECT_EQ(dataset_elements(dataset.get()), 6u);
  EXPECT_EQ(read_dataset<float>(dataset.get(), H5T_NATIVE_FLOAT), values);
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { dataset_dims(dataset.get(), 1); }),
                       "/m: has 2 dimensions, expected at most 1"));
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { read_dataset<float>(dataset.get(), H5T_NATIVE_FLOAT, 5); }),
                       "/m: holds 6 values, more than the 5 this reader accepts"));
}

// A declared extent with no data behind it reads as fill values; it must be refused instead, and
// before anything of its declared size is allocated (2^30 values here would be 4 GiB as uint32).
TEST(Hdf5Handle, DeclaredButUnstoredDataIsRefusedBeforeAllocating) {
  TempDir dir;
  const ErrorSilencer quiet;
  const std::string path = dir.file("a.h5");
  File file = create_file(path);
  declare_unwritten(file.get(), "contiguous", hsize_t{1} << 30, false);
  declare_unwritten(file.get(), "chunked", hsize_t{1} << 30, true);
  for (const char* name : {"contiguous", "chunked"}) {
    Dataset dataset = open_dataset(file.get(), name);
    const std::string message =
        error_of<Hdf5FormatError>([&] { read_dataset<std::uint32_t>(dataset.get(), H5T_NATIVE_UINT32); });
    EXPECT_EQ(message.rfind(path + ": /" + name + ": declares 1073741824 values (2.0 GiB) but the file stores 0 of its ", 0), 0u)
        << message;
    EXPECT_TRUE(contains(message, "(truncated, unfinished or crafted file)")) << message;
  }
}

TEST(Hdf5Handle, PartlyWrittenChunkedDataIsRefused) {
  TempDir dir;
  const ErrorSilencer quiet;
  File file = create_file(dir.file("a.h5"));
  declare_unwritten(file.get(), "tokens", 3 << 16, true);
  Dataset dataset = open_dataset(file.get(), "tokens");
  // Write the first chunk only.
  const std::vector<std::uint16_t> first(1 << 16, 7);
  Dataspace file_space(H5Dget_space(dataset.get()));
  const hsize_t start = 0, count = first.size();
  ASSERT_GE(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr), 0);
  Dataspace memory_space(H5Screate_simple(1, &count, nullptr));
  ASSERT_GE(H5Dwrite(dataset.get(), H5T_NATIVE_UINT16, memory_space.get(), file_space.get(), H5P_DEFAULT,
                     first.data()),
            0);
  EXPECT_TRUE(contains(error_of<Hdf5FormatError>([&] { check_storage_covers_extent(dataset.get()); }),
                       "stores 1 of its 3 chunks"));
}

}  // namespace
}  // namespace pipelane::hdf5
