#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/imageproc_lane.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using testing_io::LaneEnv;
namespace ip = imageproc;

TEST(ImageProcLane, BilinearResizeMatchesHandComputedValues) {
  // 2x2 -> 4x4: source x = (x + 0.5) / 2 - 0.5 = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (-> 1).
  const float src[4] = {0, 10, 20, 30};
  float dst[16];
  ip::resize_bilinear(src, 2, 2, 1, dst, 4, 4);
  const float want[16] = {0, 2.5f, 7.5f, 10, 5, 7.5f, 12.5f, 15, 15, 17.5f, 22.5f, 25, 20, 22.5f, 27.5f, 30};
  for (int i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(dst[i], want[i]) << i;
  // 4x1 -> 2x1: source x = 0.5 and 2.5.
  const float row[4] = {0, 10, 20, 30};
  float half[2];
  ip::resize_bilinear(row, 4, 1, 1, half, 2, 1);
  EXPECT_FLOAT_EQ(half[0], 5);
  EXPECT_FLOAT_EQ(half[1], 25);
  // RGB, 3x1 -> 2x1: source x = 0.25 and 1.75, per channel.
  const float rgb[9] = {0, 100, 200, 40, 100, 0, 80, 100, 100};
  float out[6];
  ip::resize_bilinear(rgb, 3, 1, 3, out, 2, 1);
  const float want_rgb[6] = {10, 100, 150, 70, 100, 75};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[i], want_rgb[i]) << i;
  // Same size is the identity.
  float same[4];
  ip::resize_bilinear(src, 2, 2, 1, same, 2, 2);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(same[i], src[i]);
}

ip::Image8 pattern(Arena& arena, int w, int h, int c) {
  ip::Image8 img{w, h, c, arena.allocate_n<std::uint8_t>(static_cast<std::size_t>(w) * h * c)};
  for (int i = 0; i < w * h * c; ++i) img.data[i] = static_cast<std::uint8_t>(i * 37 + 11);
  return img;
}

void expect_same(const ip::Image8& a, const ip::Image8& b) {
  ASSERT_EQ(a.width, b.width);
  ASSERT_EQ(a.height, b.height);
  ASSERT_EQ(a.channels, b.channels);
  EXPECT_EQ(0, std::memcmp(a.data, b.data, static_cast<std::size_t>(a.width) * a.height * a.channels));
}

TEST(ImageProcLane, PpmPgmAndPngRoundTrip) {
  LaneEnv env("imageproc", {});
  for (int c : {3, 1}) {
    const ip::Image8 img = pattern(env.arena, 7, 5, c);
    const std::string pnm = env.dir + (c == 3 ? "/a.ppm" : "/a.pgm"), png = env.dir + "/a" + std::to_string(c) + ".png";
    ip::encode_pnm(pnm, img);
    ip::encode_png(png, img);
    expect_same(img, ip::decode_image(pnm, env.arena));
    expect_same(img, ip::decode_image(png, env.arena));
  }
  // A 16-bit PGM with a comment in the header scales to 8 bits.
  testing_io::write_file(env.dir + "/w.pgm", std::string("P5\n# c\n2 1\n65535\n\xff\xff\x00\x00", 21));
  const auto w = ip::decode_image(env.dir + "/w.pgm", env.arena);
  ASSERT_EQ(w.width, 2);
  EXPECT_EQ(w.data[0], 255);
  EXPECT_EQ(w.data[1], 0);
}

TEST(ImageProcLane, PipelineOnGeneratedImagesWritesDecodablePngs) {
  LaneEnv env("imageproc", {{"generate", "3"}, {"width", "64"}, {"height", "48"}, {"out_width", "40"},
                            {"out_height", "30"}, {"blur", "2"}, {"watermark", "Lane 1"}, {"steps_per_image", "1"}},
              1u << 20);
  auto lane = builtin_lane_factories().at("imageproc")();
  lane->setup(env.ctx);
  EXPECT_EQ(lane->work_unit(), "images");
  int steps = 0;
  while (!lane->finished() && steps < 10) {
    EXPECT_EQ(lane->step(env.ctx), 1.0);
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  Arena scratch("check", 1u << 20);
  for (int i = 0; i < 3; ++i) {
    const std::string path = env.dir + "/image_00000" + std::to_string(i) + ".png";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const auto img = ip::decode_image(path, scratch);
    EXPECT_EQ(img.width, 40);
    EXPECT_EQ(img.height, 30);
    EXPECT_EQ(img.channels, 3);
  }
  EXPECT_FALSE(std::filesystem::exists(env.dir + "/image_000000.png.tmp"));
  const auto rep = lane->report();
  EXPECT_EQ(rep["images_done"], 3);
  EXPECT_NEAR(rep["input_megapixels"].get<double>(), 3 * 64 * 48 / 1e6, 1e-9);
  EXPECT_NEAR(rep["output_megapixels"].get<double>(), 3 * 40 * 30 / 1e6, 1e-9);
  EXPECT_EQ(rep["output_dir"], env.dir);
  EXPECT_EQ(lane->step(env.ctx), 0.0);  // finished: nothing more

  // The watermark changes the bottom-right corner, not the top-left.
  LaneEnv plain("imageproc", {{"generate", "1"}, {"width", "64"}, {"height", "48"}, {"out_width", "40"},
                              {"out_height", "30"}, {"blur", "2"}, {"watermark", ""}, {"format", "ppm"},
                              {"steps_per_image", "1"}});
  auto p = make_imageproc_lane();
  p->setup(plain.ctx);
  p->step(plain.ctx);
  const auto a = ip::decode_image(env.dir + "/image_000000.png", scratch);
  const auto b = ip::decode_image(plain.dir + "/image_000000.ppm", scratch);
  EXPECT_EQ(0, std::memcmp(a.data, b.data, 40 * 3 * 5));
  EXPECT_NE(0, std::memcmp(a.data + 40 * 3 * 24, b.data + 40 * 3 * 24, 40 * 3 * 4));
}

TEST(ImageProcLane, CorruptImageIsALaneErrorNamingTheFile) {
  LaneEnv src("imageproc_src", {});
  ip::encode_pnm(src.dir + "/a_good.ppm", pattern(src.arena, 8, 8, 3));
  std::string png = "\x89PNG\r\n\x1a\n";
  png += std::string(40, 'z');
  testing_io::write_file(src.dir + "/b_bad.png", png);
  testing_io::write_file(src.dir + "/c_short.ppm", "P6\n8 8\n255\nabc");
  testing_io::write_file(src.dir + "/notes.txt", "not an image, skipped");
  LaneEnv env("imageproc", {{"input_dir", src.dir}, {"out_width", "4"}, {"out_height", "4"}, {"steps_per_image", "1"}});
  auto lane = make_imageproc_lane();
  lane->setup(env.ctx);
  EXPECT_EQ(lane->report()["images_total"], 3);
  EXPECT_EQ(lane->step(env.ctx), 1.0);
  for (const char* bad : {"b_bad.png", "c_short.ppm"}) {
    try {
      lane->step(env.ctx);
      FAIL() << "no error for " << bad;
    } catch (const LaneError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
    lane->load(R"({"next":2,"total":3,"next_file":"c_short.ppm","images_done":1,"input_megapixels":0,"output_megapixels":0,"bytes_written":0})");
  }
  // Too big for the quota: a LaneError naming the file, not an allocation elsewhere.
  ip::encode_pnm(src.dir + "/a_good.ppm", pattern(src.arena, 600, 600, 3));
  LaneEnv tight("imageproc", {{"input_dir", src.dir}}, 512u << 10);
  auto t = make_imageproc_lane();
  t->setup(tight.ctx);
  try {
    t->step(tight.ctx);
    FAIL() << "no quota error";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("a_good.ppm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("quota"), std::string::npos) << e.what();
  }
}

TEST(ImageProcLane, SaveLoadResumesAtTheNextImage) {
  LaneEnv src("imageproc_src", {});
  for (const char* name : {"one.ppm", "three.pgm", "two.png"}) {
    const ip::Image8 img = pattern(src.arena, 20, 10, std::string(name).find("pgm") != std::string::npos ? 1 : 3);
    if (std::string(name).find(".png") != std::string::npos) ip::encode_png(src.dir + "/" + name, img);
    else ip::encode_pnm(src.dir + "/" + name, img);
  }
  const std::map<std::string, std::string> opts = {{"input_dir", src.dir}, {"out_width", "10"}, {"out_height", "5"},
                                                   {"blur_kind", "box"}, {"steps_per_image", "1"}};
  LaneEnv a("imageproc", opts);
  auto first = make_imageproc_lane();
  first->setup(a.ctx);
  first->step(a.ctx);  // one.ppm
  EXPECT_TRUE(std::filesystem::exists(a.dir + "/one.png"));
  const std::string state = first->save();

  LaneEnv b("imageproc", opts);
  auto second = make_imageproc_lane();
  second->setup(b.ctx);
  second->load(state);
  EXPECT_EQ(second->step(b.ctx), 1.0);
  EXPECT_FALSE(std::filesystem::exists(b.dir + "/one.png"));
  EXPECT_TRUE(std::filesystem::exists(b.dir + "/three.png"));  // sorted: one, three, two
  EXPECT_FALSE(second->finished());
  second->step(b.ctx);
  EXPECT_TRUE(std::filesystem::exists(b.dir + "/two.png"));
  EXPECT_TRUE(second->finished());
  EXPECT_EQ(second->report()["images_done"], 3);
  Arena scratch("check", 1u << 20);
  EXPECT_EQ(ip::decode_image(b.dir + "/three.png", scratch).channels, 1);  // gray stays gray
}

TEST(ImageProcLane, ThreeStepsPerImageWriteTheSameFilesAsOne) {
  const std::map<std::string, std::string> base = {{"generate", "2"}, {"width", "64"}, {"height", "48"},
                                                   {"out_width", "40"}, {"out_height", "30"}, {"blur", "2"}};
  std::map<std::string, std::string> whole;  // the files split 1 wrote (its directory goes with it)
  for (int split : {1, 2, 3}) {
    auto opts = base;
    opts["steps_per_image"] = std::to_string(split);
    LaneEnv env("imageproc", opts, 1u << 20);
    auto lane = make_imageproc_lane();
    lane->setup(env.ctx);
    std::vector<double> units;
    while (!lane->finished() && units.size() < 20) units.push_back(lane->step(env.ctx));
    ASSERT_EQ(units.size(), 2u * split) << "steps for split " << split;
    double sum = 0;
    for (double u : units) sum += u;
    EXPECT_NEAR(sum, 2.0, 1e-12);  // each image's steps add up to one image
    if (split == 3) EXPECT_NEAR(units[0], 1.0 / 3, 1e-12);
    if (split == 2) EXPECT_NEAR(units[1], 2.0 / 3, 1e-12);  // stages 1-2 in the second step
    EXPECT_EQ(lane->report()["images_done"], 2);
    for (const char* name : {"image_000000.png", "image_000001.png"}) {
      const std::string bytes = testing_io::read_file(env.dir + "/" + name);
      ASSERT_GT(bytes.size(), 8u) << name;
      if (split == 1) whole[name] = bytes;
      else EXPECT_TRUE(bytes == whole[name]) << name << " differs with " << split << " steps per image";
    }
  }
}

TEST(ImageProcLane, SavedPartWayThroughAnImageRedoesIt) {
  const std::map<std::string, std::string> opts = {{"generate", "2"}, {"width", "32"}, {"height", "24"},
                                                   {"out_width", "16"}, {"out_height", "12"}};
  LaneEnv a("imageproc", opts, 1u << 20);
  auto first = make_imageproc_lane();
  first->setup(a.ctx);
  first->step(a.ctx);
  first->step(a.ctx);  // two thirds of image 0
  EXPECT_FALSE(std::filesystem::exists(a.dir + "/image_000000.png"));
  LaneEnv b("imageproc", opts, 1u << 20);
  auto second = make_imageproc_lane();
  second->setup(b.ctx);
  second->load(first->save());
  for (int i = 0; i < 3; ++i) second->step(b.ctx);
  EXPECT_TRUE(std::filesystem::exists(b.dir + "/image_000000.png"));
  EXPECT_FALSE(second->finished());
}

TEST(ImageProcLane, OptionsAreValidated) {
  LaneEnv unknown("imageproc", {{"generate", "1"}, {"bluur", "2"}});
  EXPECT_THROW(make_imageproc_lane()->setup(unknown.ctx), LaneError);
  LaneEnv both("imageproc", {{"generate", "1"}, {"input_dir", "/tmp"}});
  EXPECT_THROW(make_imageproc_lane()->setup(both.ctx), LaneError);
  LaneEnv fmt("imageproc", {{"generate", "1"}, {"format", "jpeg"}});
  EXPECT_THROW(make_imageproc_lane()->setup(fmt.ctx), LaneError);
  LaneEnv holder("imageproc_empty", {});
  LaneEnv empty_dir("imageproc", {{"input_dir", holder.dir}});
  EXPECT_THROW(make_imageproc_lane()->setup(empty_dir.ctx), LaneError);
}

}  // namespace
}  // namespace pipelane
