// The safetensors reader (trainer/hf/safetensors.h) on files it wrote and on crafted ones: every
// malformed, truncated or lying header is one SafetensorsError naming what is wrong, found before
// anything the header claims is allocated.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "tests/datasets/test_files.h"
#include "trainer/hf/safetensors.h"

namespace pipelane {
namespace {

using test_support::TempDir;
using test_support::write_file;

// A file from a header text and `data_bytes` bytes of data.
std::string crafted(const std::string& header, std::size_t data_bytes, std::uint64_t claimed_len = 0) {
  const std::uint64_t n = claimed_len ? claimed_len : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data_bytes, '\0');
}

std::string error_of(const std::string& bytes) {
  TempDir tmp;
  write_file(tmp.file("m.safetensors"), bytes);
  try {
    SafetensorsReader r(tmp.file("m.safetensors"));
    for (const auto& [name, info] : r.tensors()) r.read_f32(name);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, WritesAndReadsBack) {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  write_safetensors(path, {{"b", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"a", {4}, {-1.5f, 0.f, 3.25f, 1e-30f}}},
                    {{"format", "pt"}});
  SafetensorsReader r(path);
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.tensors().at("b").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(r.read_f32("b"), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(r.read_f32("a"), (std::vector<float>{-1.5f, 0.f, 3.25f, 1e-30f}));
  EXPECT_THROW(r.read_f32("c"), SafetensorsError);
}

TEST(Safetensors, ConvertsHalfAndBfloat16) {
  // F16 1.0 = 0x3c00, -2.0 = 0xc000, 2^-24 (smallest subnormal) = 0x0001; BF16 1.0 = 0x3f80.
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}})";
  std::string file = crafted(header, 0);
  const unsigned char data[] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0x80, 0x3f};
  file.append(reinterpret_cast<const char*>(data), sizeof data);
  TempDir tmp;
  write_file(tmp.file("m.safetensors"), file);
  SafetensorsReader r(tmp.file("m.safetensors"));
  EXPECT_EQ(r.read_f32("h"), (std::vector<float>{1.0f, -2.0f, 5.9604644775390625e-8f}));
  EXPECT_EQ(r.read_f32("b"), (std::vector<float>{1.0f}));
}

TEST(Safetensors, MalformedTruncatedAndLyingHeadersAreOneClearError) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(error_of(crafted(ok, 16)), "");
  const struct {
    std::string bytes, expected;
  } cases[] = {
      {"abc", "truncated: 3 bytes"},
      {crafted(ok, 16, 1ull << 40), "exceeds the format's limit"},
      {crafted(ok, 16, 4096), "truncated: the header claims 4096 bytes"},
      {crafted(ok, 16, 0xFFFFFFFFFFFFFFFFull), "exceeds the format's limit"},
      {crafted("{\"w\": [1, 2", 0), "not valid JSON"},
      {crafted("[1, 2]", 0), "not a JSON object"},
      {crafted(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16), "dtype I64 is not a float type"},
      {crafted(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "not a size"},
      {crafted(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 8), "lie outside the 8 data bytes"},
      {crafted(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,4]}})", 16), "lie outside"},
      {crafted(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16), "needs 4 x 4"},
      // A shape whose product overflows 64 bits, and one far larger than the file: refused
      // before any allocation (a reader that trusted it would ask for exabytes).
      {crafted(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", 16),
       "larger than the file"},
      {crafted(R"({"w":{"dtype":"F32","shape":[1000000000000],"data_offsets":[0,16]}})", 16), "larger than the file"},
      {crafted(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
               16),
       "overlap"},
      {crafted(R"({"w":{"dtype":"F32","shape":[2,2]}})", 16), "data_offsets is not [begin, end]"},
      {crafted(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"k":1}})", 16),
       "__metadata__.k is not a string"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.bytes);
    EXPECT_NE(e.find(c.expected), std::string::npos) << "expected '" << c.expected << "', got '" << e << "'";
    EXPECT_NE(e.find("m.safetensors: "), std::string::npos) << e;  // names the file
  }
}

}  // namespace
}  // namespace pipelane
