// jpegimage: a real JPEG round trip through libjpeg-turbo, and the lane's decode, resize,
// watermark, encode against the same steps done by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/imageproc_lane.h"
#include "lanes/builtin/jpeg_codec.h"
#include "lanes/builtin/jpegimage_lane.h"
#include "tests/lanes/builtin_io_test_env.h"

namespace pipelane {
namespace {

using imageproc::Image8;
using testing_io::LaneEnv;

// Peak signal-to-noise ratio of b against a (same size), in dB.
double psnr(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  double se = 0;
  for (std::size_t i = 0; i < n; ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return se == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 * n / se);
}

Image8 decode_string(const std::string& bytes, Arena& arena) {
  return jpeg::decode(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), "test", arena);
}

TEST(JpegCodec, RoundTripKeepsTheImage) {
  Arena arena("jpeg", 16u << 20);
  const Image8 picture = imageproc::synthesize(160, 120, 3, 0, arena);
  const std::string q95 = jpeg::encode(picture, 95, "test"), q20 = jpeg::encode(picture, 20, "test");
  ASSERT_GT(q95.size(), 100u);
  EXPECT_EQ(static_cast<unsigned char>(q95[0]), 0xFF);  // SOI marker
  EXPECT_EQ(static_cast<unsigned char>(q95[1]), 0xD8);
  EXPECT_LT(q20.size(), q95.size());
  const Image8 back = decode_string(q95, arena);
  ASSERT_EQ(back.width, 160);
  ASSERT_EQ(back.height, 120);
  ASSERT_EQ(back.channels, 3);
  const std::size_t n = 160 * 120 * 3;
  // JPEG is lossy: quality 95 of a smooth picture keeps ~35-40 dB (4:2:0 chroma loses most at the
  // discs' edges); 30 dB is a visibly faithful copy, and a decoder bug (wrong colour order, a
  // shifted row) lands far below it.
  const double good = psnr(picture.data, back.data, n);
  EXPECT_GT(good, 30.0);
  const double poor = psnr(picture.data, decode_string(q20, arena).data, n);
  EXPECT_LT(poor, good);
  // Gray stays gray.
  Image8 gray{64, 32, 1, arena.allocate_n<std::uint8_t>(64 * 32, "gray")};
  for (int i = 0; i < 64 * 32; ++i) gray.data[i] = static_cast<std::uint8_t>(i % 64 * 4);
  const Image8 g = decode_string(jpeg::encode(gray, 90, "gray"), arena);
  EXPECT_EQ(g.channels, 1);
  EXPECT_GT(psnr(gray.data, g.data, 64 * 32), 30.0);
  // Not a JPEG, and a JPEG cut short: LaneErrors naming the input.
  EXPECT_THROW(decode_string("not a jpeg at all", arena), LaneError);
  try {
    decode_string(q95.substr(0, q95.size() / 3), arena);  // libjpeg alone would pad it with gray
    ADD_FAILURE() << "a truncated JPEG decoded";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("jpegimage: test: corrupt JPEG"), std::string::npos) << e.what();
  }
  EXPECT_NE(jpeg::library_version().find("libjpeg"), std::string::npos);
}

TEST(JpegImageLane, DecodeResizeWatermarkEncodeMatchesTheStepsByHand) {
  LaneEnv env("jpegimage", {});
  const std::string in_dir = env.dir + "/in";
  std::filesystem::create_directory(in_dir);
  Arena arena("inputs", 16u << 20);
  for (int i = 0; i < 3; ++i) {
    const std::string bytes = jpeg::encode(imageproc::synthesize(200, 150, 11, i, arena), 92, "input");
    testing_io::write_file(in_dir + "/pic" + std::to_string(i) + (i == 2 ? ".JPEG" : ".jpg"), bytes);
  }
  testing_io::write_file(in_dir + "/notes.txt", "not an image");
  LaneEnv run("jpegimage", {{"input_dir", in_dir}, {"out_width", "100"}, {"out_height", "75"}, {"quality", "95"}});
  auto lane = builtin_lane_factories().at("jpegimage")();
  lane->setup(run.ctx);
  EXPECT_EQ(lane->work_unit(), "images");
  EXPECT_FALSE(lane->runs_on_device());
  double units = 0;
  int steps = 0;
  while (!lane->finished() && steps < 100) {
    units += lane->step(run.ctx);
    ++steps;
  }
  EXPECT_EQ(steps, 9);  // 3 images x 3 steps
  EXPECT_NEAR(units, 3.0, 1e-12);
  const auto rep = lane->report();
  EXPECT_EQ(rep["images_done"], 3);
  EXPECT_NE(rep["device"].get<std::string>().find("nvJPEG and NPP are not available"), std::string::npos);
  for (int i = 0; i < 3; ++i) {
    // By hand: decode the input, resize, watermark, quantize.
    const Image8 in = decode_string(testing_io::read_file(in_dir + "/pic" + std::to_string(i) + (i == 2 ? ".JPEG" : ".jpg")), arena);
    std::vector<float> src(in.data, in.data + 200 * 150 * 3), out(100 * 75 * 3);
    imageproc::resize_bilinear(src.data(), 200, 150, 3, out.data(), 100, 75);
    imageproc::watermark(out.data(), 100, 75, 3, "PIPELANE", 0.5f);
    std::vector<std::uint8_t> want(out.size());
    for (std::size_t k = 0; k < out.size(); ++k) want[k] = static_cast<std::uint8_t>(std::clamp(std::lround(out[k]), 0L, 255L));
    const std::string written = testing_io::read_file(run.dir + "/pic" + std::to_string(i) + ".jpg");
    ASSERT_FALSE(written.empty()) << i;
    const Image8 got = decode_string(written, arena);
    ASSERT_EQ(got.width, 100);
    ASSERT_EQ(got.height, 75);
    // Only the output's own JPEG loss separates them (quality 95: > 30 dB, as above).
    EXPECT_GT(psnr(want.data(), got.data, want.size()), 30.0) << i;
    // The watermark is there: the bottom-right corner differs from the unwatermarked resize.
    std::vector<float> plain(100 * 75 * 3);
    imageproc::resize_bilinear(src.data(), 200, 150, 3, plain.data(), 100, 75);
    double corner_change = 0;
    // The text's plate at this size: x 50..98, y 65..73 (imageproc's layout, scale 1). Darkened by
    // 25% and white glyphs blended at 50% over ~40% of it: a mean change of 38+ of 255 whatever
    // the picture there, against JPEG noise of a few.
    for (int y = 65; y < 74; ++y)
      for (int x = 51; x < 98; ++x) corner_change += std::fabs(got.data[(y * 100 + x) * 3] - plain[(y * 100 + x) * 3]);
    EXPECT_GT(corner_change / (9 * 47), 15.0) << i;
  }
}

TEST(JpegImageLane, GeneratedImagesResumeAndCorruptInputIsRefused) {
  const std::map<std::string, std::string> opts = {{"generate", "5"}, {"width", "96"}, {"height", "64"},
                                                   {"out_width", "48"}, {"out_height", "32"}};
  LaneEnv a("jpegimage", opts);
  auto straight = make_jpegimage_lane();
  straight->setup(a.ctx);
  while (!straight->finished()) straight->step(a.ctx);
  LaneEnv b("jpegimage", opts);
  auto first = make_jpegimage_lane();
  first->setup(b.ctx);
  for (int i = 0; i < 7; ++i) first->step(b.ctx);  // image 2 part-way (its first of three steps)
  const std::string state = first->save();
  LaneEnv c("jpegimage", opts);
  auto second = make_jpegimage_lane();
  second->setup(c.ctx);
  second->load(state);
  while (!second->finished()) second->step(c.ctx);
  for (int i = 2; i < 5; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "/image_%06d.jpg", i);
    EXPECT_EQ(testing_io::read_file(c.dir + name), testing_io::read_file(a.dir + name)) << name;  // same bytes
  }
  EXPECT_EQ(second->report()["bytes_written"], straight->report()["bytes_written"]);

  LaneEnv env("jpegimage", {});
  testing_io::write_file(env.dir + "/broken.jpg", "\xFF\xD8\xFF\xE0 truncated");
  LaneEnv bad("jpegimage", {{"input_dir", env.dir}});
  auto lane = make_jpegimage_lane();
  lane->setup(bad.ctx);
  try {
    lane->step(bad.ctx);
    FAIL() << "no error";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.jpg"), std::string::npos) << e.what();
  }
  LaneEnv neither("jpegimage", {{"width", "10"}});
  EXPECT_THROW(make_jpegimage_lane()->setup(neither.ctx), LaneError);
}

}  // namespace
}  // namespace pipelane
