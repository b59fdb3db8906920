// Checks the golden-file reader against the committed tests/golden/gpt2_tiny.bin
// (tests run with the repository root as working directory).
#include "tests/golden/golden_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipelane::golden {
namespace {

const char* kTinyPath = "tests/golden/gpt2_tiny.bin";

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A scratch file removed when the test ends.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& tag, const std::vector<char>& bytes) {
    path = (std::filesystem::temp_directory_path() /
            ("pipelane_golden_" + tag + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             ".bin"))
               .string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::remove(path.c_str()); }
};

std::vector<std::string> param_names(int layers) {
  std::vector<std::string> names = {"wte", "wpe"};
  for (int i = 0; i < layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    for (const char* s : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      names.push_back(p + s);
    }
  }
  names.push_back("ln_f.weight");
  names.push_back("ln_f.bias");
  return names;
}

TEST(GoldenFile, LoadsTinyGpt2Config) {
  const GoldenFile g = GoldenFile::load(kTinyPath);
  const Record& cfg = g.at("config");
  ASSERT_EQ(cfg.dtype, kDtypeI32);
  ASSERT_EQ(cfg.dims, std::vector<std::int64_t>({8}));
  EXPECT_EQ(cfg.i32, std::vector<std::int32_t>({2, 32, 4, 16, 97, 2, 12, 10}));

  const Record& hp = g.at("hparams");
  ASSERT_EQ(hp.dtype, kDtypeF32);
  ASSERT_EQ(hp.numel(), 6);
  EXPECT_FLOAT_EQ(hp.f32[0], 1e-3f);
  EXPECT_FLOAT_EQ(hp.f32[1], 0.9f);
  EXPECT_FLOAT_EQ(hp.f32[2], 0.95f);
  EXPECT_FLOAT_EQ(hp.f32[3], 1e-8f);
  EXPECT_FLOAT_EQ(hp.f32[4], 0.1f);
  EXPECT_FLOAT_EQ(hp.f32[5], 1.0f);
}

TEST(GoldenFile, RecordOrderAndShapes) {
  const GoldenFile g = GoldenFile::load(kTinyPath);
  const auto& c = g.at("config").i32;
  const int L = c[0], C = c[1], maxT = c[3], V = c[4], B = c[5], T = c[6], steps = c[7];

  std::vector<std::string> expected = {"config", "hparams", "inputs", "targets"};
  const auto params = param_names(L);
  for (const auto& p : params) expected.push_back("param/" + p);
  expected.push_back("logits");
  expected.push_back("loss");
  for (const auto& p : params) expected.push_back("grad/" + p);
  expected.push_back("losses");
  std::vector<std::string> got;
  for (const auto& r : g.records()) got.push_back(r.name);
  EXPECT_EQ(got, expected);

  for (const char* name : {"inputs", "targets"}) {
    const Record& r = g.at(name);
    ASSERT_EQ(r.dtype, kDtypeI32) << name;
    ASSERT_EQ(r.dims, std::vector<std::int64_t>({B, T})) << name;
    ASSERT_EQ(static_cast<std::int64_t>(r.i32.size()), r.numel());
    for (std::int32_t tok : r.i32) {
      EXPECT_GE(tok, 0);
      EXPECT_LT(tok, V);
    }
  }

  using D = std::vector<std::int64_t>;
  EXPECT_EQ(g.at("param/wte").dims, D({V, C}));
  EXPECT_EQ(g.at("param/wpe").dims, D({maxT, C}));
  EXPECT_EQ(g.at("param/h.0.attn.c_attn.weight").dims, D({3 * C, C}));
  EXPECT_EQ(g.at("param/h.0.attn.c_attn.bias").dims, D({3 * C}));
  EXPECT_EQ(g.at("param/h.1.attn.c_proj.weight").dims, D({C, C}));
  EXPECT_EQ(g.at("param/h.1.mlp.c_fc.weight").dims, D({4 * C, C}));
  EXPECT_EQ(g.at("param/h.1.mlp.c_fc.bias").dims, D({4 * C}));
  EXPECT_EQ(g.at("param/h.1.mlp.c_proj.weight").dims, D({C, 4 * C}));
  EXPECT_EQ(g.at("param/ln_f.bias").dims, D({C}));
  EXPECT_EQ(g.at("logits").dims, D({B, T, V}));

  for (const auto& p : params) {
    const Record& w = g.at("param/" + p);
    const Record& gr = g.at("grad/" + p);
    EXPECT_EQ(w.dtype, kDtypeF32) << p;
    EXPECT_EQ(gr.dtype, kDtypeF32) << p;
    EXPECT_EQ(w.dims, gr.dims) << p;
    EXPECT_EQ(static_cast<std::int64_t>(w.f32.size()), w.numel()) << p;
    EXPECT_EQ(static_cast<std::int64_t>(gr.f32.size()), gr.numel()) << p;
  }

  // initial-model values: LayerNorm weight 1 / bias 0, biases 0
  for (float v : g.at("param/h.0.ln_1.weight").f32) EXPECT_EQ(v, 1.0f);
  for (float v : g.at("param/ln_f.bias").f32) EXPECT_EQ(v, 0.0f);
  for (float v : g.at("param/h.1.mlp.c_fc.bias").f32) EXPECT_EQ(v, 0.0f);

  const Record& loss = g.at("loss");
  ASSERT_EQ(loss.numel(), 1);
  const Record& losses = g.at("losses");
  ASSERT_EQ(losses.dims, D({steps}));
  ASSERT_EQ(losses.f32.size(), 10u);
  EXPECT_EQ(losses.f32[0], loss.f32[0]);
  // untrained model: loss near ln(V); training on one batch lowers it
  EXPECT_NEAR(loss.f32[0], std::log(static_cast<float>(V)), 0.5f);
  EXPECT_LT(losses.f32[9], losses.f32[0]);
  for (float v : losses.f32) EXPECT_TRUE(std::isfinite(v));
}

TEST(GoldenFile, LookupOfMissingRecord) {
  const GoldenFile g = GoldenFile::load(kTinyPath);
  EXPECT_TRUE(g.has("loss"));
  EXPECT_FALSE(g.has("param/nope"));
  EXPECT_THROW(g.at("param/nope"), std::out_of_range);
}

TEST(GoldenFile, MissingFileThrows) {
  EXPECT_THROW(GoldenFile::load("tests/golden/does_not_exist.bin"), std::runtime_error);
}

TEST(GoldenFile, TruncatedFileThrows) {
  const auto bytes = read_bytes(kTinyPath);
  ASSERT_GT(bytes.size(), 100u);
  for (std::size_t keep : {std::size_t{4}, std::size_t{14}, std::size_t{40}, bytes.size() / 2,
                           bytes.size() - 1}) {
    TempFile f("trunc" + std::to_string(keep), std::vector<char>(bytes.begin(), bytes.begin() + keep));
    try {
      GoldenFile::load(f.path);
      ADD_FAILURE() << "no exception for a file truncated to " << keep << " bytes";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
  }
}

TEST(GoldenFile, BadMagicThrows) {
  auto bytes = read_bytes(kTinyPath);
  bytes[0] = 'X';
  TempFile f("magic", bytes);
  try {
    GoldenFile::load(f.path);
    ADD_FAILURE() << "no exception for bad magic";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
  }
}

TEST(GoldenFile, BadVersionThrows) {
  auto bytes = read_bytes(kTinyPath);
  bytes[8] = 7;  // u32 version, little-endian low byte
  TempFile f("version", bytes);
  try {
    GoldenFile::load(f.path);
    ADD_FAILURE() << "no exception for version 7";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("version"), std::string::npos) << e.what();
  }
}

TEST(GoldenFile, TrailingBytesThrow) {
  auto bytes = read_bytes(kTinyPath);
  bytes.push_back(0);
  TempFile f("trailing", bytes);
  EXPECT_THROW(GoldenFile::load(f.path), std::runtime_error);
}

}  // namespace
}  // namespace pipelane::golden
