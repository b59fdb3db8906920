#include "lanes/builtin/jpegimage_lane.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "lanes/builtin/imageproc_lane.h"
#include "lanes/builtin/jpeg_codec.h"

namespace pipelane {
namespace {

using imageproc::Image8;

constexpr int kMaxSide = 1 << 16;
constexpr std::int64_t kMaxPool = 16;
constexpr int kInputQuality = 90;  // the generated pictures' JPEG quality

class JpegImageLane final : public Lane {
 public:
  std::string name() const override { return "jpegimage"; }
  std::string work_unit() const override { return "images"; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    input_dir_ = o.get_string("input_dir", "");
    generate_ = o.get_int("generate", 0, 0, 100'000'000);
    width_ = static_cast<int>(o.get_int("width", 640, 1, kMaxSide));
    height_ = static_cast<int>(o.get_int("height", 480, 1, kMaxSide));
    seed_ = static_cast<std::uint64_t>(o.get_int("seed", 1, 0, INT64_MAX));
    out_w_ = static_cast<int>(o.get_int("out_width", 320, 1, kMaxSide));
    out_h_ = static_cast<int>(o.get_int("out_height", 240, 1, kMaxSide));
    watermark_ = o.get_string("watermark", "PIPELANE");
    opacity_ = static_cast<float>(o.get_double("watermark_opacity", 0.5, 0.0, 1.0));
    quality_ = static_cast<int>(o.get_int("quality", 85, 1, 100));
    steps_per_image_ = static_cast<int>(o.get_int("steps_per_image", 3, 1, 3));
    o.reject_unknown();
    if (input_dir_.empty() == (generate_ == 0))
      throw LaneError("[lane.jpegimage]: set exactly one of 'input_dir = DIR' or 'generate = N'");
    output_dir_ = ctx.output_dir;
    if (!input_dir_.empty()) list_inputs();
    else make_pool(ctx.arena);
  }

  // stages [first, last) of the image in progress: 0 decode, 1 resize + watermark, 2 encode + write.
  double step(LaneContext& ctx) override {
    if (finished()) return 0.0;
    const int first = phase_ * 3 / steps_per_image_, last = (phase_ + 1) * 3 / steps_per_image_;
    try {
      for (int stage = first; stage < last; ++stage) run_stage(stage, ctx.arena);
    } catch (const ArenaQuotaError& e) {
      phase_ = 0;
      throw LaneError("jpegimage: " + source_name() + " does not fit the lane's memory quota: " + e.what());
    } catch (...) {
      phase_ = 0;  // a retry (after load()) starts the image over
      throw;
    }
    if (++phase_ == steps_per_image_) {
      phase_ = 0;
      ++next_;
      ++done_;
    }
    return static_cast<double>(last - first) / 3.0;
  }

  bool finished() const override { return next_ >= total(); }

  std::string save() const override {
    nlohmann::json j;
    j["next"] = next_;
    j["total"] = total();
    if (!input_dir_.empty() && next_ < files_.size()) j["next_file"] = files_[next_];
    j["images_done"] = done_;
    j["input_megapixels"] = in_mpix_;
    j["output_megapixels"] = out_mpix_;
    j["bytes_read"] = bytes_read_;
    j["bytes_written"] = bytes_written_;
    return j.dump();
  }

  void load(const std::string& state) override;

  nlohmann::json report() const override {
    nlohmann::json j;
    j["source"] = input_dir_.empty() ? "generated " + std::to_string(width_) + "x" + std::to_string(height_) +
                                           " (" + std::to_string(pool_.size()) + " distinct JPEGs)"
                                     : input_dir_;
    j["images_total"] = total();
    j["images_done"] = done_;
    j["input_megapixels"] = in_mpix_;
    j["output_megapixels"] = out_mpix_;
    j["output_size"] = std::to_string(out_w_) + "x" + std::to_string(out_h_);
    j["quality"] = quality_;
    j["bytes_read"] = bytes_read_;
    j["bytes_written"] = bytes_written_;
    j["output_dir"] = output_dir_;
    j["codec"] = jpeg::library_version();
    j["device"] = "cpu: nvJPEG and NPP are not available in this build, so decode, resize, watermark and encode "
                  "run on the CPU";
    return j;
  }

 private:
  std::size_t total() const { return input_dir_.empty() ? static_cast<std::size_t>(generate_) : files_.size(); }
  std::string source_name() const {
    return input_dir_.empty() ? "generated image " + std::to_string(next_) : input_dir_ + "/" + files_[next_];
  }

  void list_inputs() {
    std::error_code ec;
    std::filesystem::directory_iterator it(input_dir_, ec), end;
    if (ec) throw LaneError("jpegimage: cannot list input_dir '" + input_dir_ + "': " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) throw LaneError("jpegimage: cannot list input_dir '" + input_dir_ + "': " + ec.message());
      if (!it->is_regular_file(ec)) continue;
      std::string ext = it->path().extension().string();
      for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (ext == ".jpg" || ext == ".jpeg") files_.push_back(it->path().filename().string());
    }
    std::sort(files_.begin(), files_.end());
    if (files_.empty()) throw LaneError("jpegimage: input_dir '" + input_dir_ + "' has no .jpg/.jpeg images");
  }

  void make_pool(Arena& arena) {
    const std::int64_t pool = std::min(generate_, kMaxPool);
    for (std::int64_t i = 0; i < pool; ++i) {
      arena.reset();
      try {
        const Image8 picture = imageproc::synthesize(width_, height_, seed_, static_cast<std::uint64_t>(i), arena);
        pool_.push_back(jpeg::encode(picture, kInputQuality, "generated image " + std::to_string(i)));
      } catch (const ArenaQuotaError& e) {
        throw LaneError(std::string("jpegimage: a generated picture does not fit the lane's memory quota: ") +
                        e.what());
      }
    }
    arena.reset();
  }

  std::string read_input() const {
    if (input_dir_.empty()) return pool_[next_ % pool_.size()];
    const std::string path = source_name();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw LaneError("jpegimage: cannot open " + path);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw LaneError("jpegimage: error reading " + path);
    return bytes;
  }

  void run_stage(int stage, Arena& arena) {
    const std::size_t out_samples = static_cast<std::size_t>(out_w_) * out_h_;
    if (stage == 0) {
      arena.reset();  // this lane keeps nothing else in its arena; every image starts empty
      const std::string bytes = read_input();
      in_ = jpeg::decode(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), source_name(), arena);
      in_bytes_ = bytes.size();
    } else if (stage == 1) {
      const std::size_t in_samples = static_cast<std::size_t>(in_.width) * in_.height * in_.channels;
      float* src = arena.allocate_n<float>(in_samples, "decoded pixels (float)");
      for (std::size_t i = 0; i < in_samples; ++i) src[i] = in_.data[i];
      img_ = arena.allocate_n<float>(out_samples * in_.channels, "resized image");
      imageproc::resize_bilinear(src, in_.width, in_.height, in_.channels, img_, out_w_, out_h_);
      imageproc::watermark(img_, out_w_, out_h_, in_.channels, watermark_, opacity_);
    } else {
      const std::size_t n = out_samples * in_.channels;
      Image8 o8{out_w_, out_h_, in_.channels, arena.allocate_n<std::uint8_t>(n, "output pixels")};
      for (std::size_t i = 0; i < n; ++i)
        o8.data[i] = static_cast<std::uint8_t>(std::clamp(std::lround(img_[i]), 0L, 255L));
      write_output(jpeg::encode(o8, quality_, source_name()));
    }
  }

  void write_output(const std::string& jpeg_bytes) {
    char generated[32];
    std::snprintf(generated, sizeof generated, "image_%06zu", next_);
    const std::string stem = input_dir_.empty() ? generated : std::filesystem::path(files_[next_]).stem().string();
    const std::string out = output_dir_ + "/" + stem + ".jpg", tmp = out + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(jpeg_bytes.data(), static_cast<std::streamsize>(jpeg_bytes.size()));
      if (!f.flush()) throw LaneError("jpegimage: error writing " + tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, out, ec);
    if (ec) throw LaneError("jpegimage: cannot rename " + tmp + " to " + out + ": " + ec.message());
    in_mpix_ += static_cast<double>(in_.width) * in_.height / 1e6;
    out_mpix_ += static_cast<double>(out_w_) * out_h_ / 1e6;
    bytes_read_ += in_bytes_;
    bytes_written_ += jpeg_bytes.size();
  }

  // options
  std::string input_dir_, output_dir_, watermark_;
  std::int64_t generate_ = 0;
  int width_ = 640, height_ = 480, out_w_ = 320, out_h_ = 240, quality_ = 85, steps_per_image_ = 3;
  float opacity_ = 0.5f;
  std::uint64_t seed_ = 1;
  std::vector<std::string> files_, pool_;  // input names; or the generated JPEGs
  // progress
  std::size_t next_ = 0;
  std::uint64_t done_ = 0, bytes_read_ = 0, bytes_written_ = 0;
  double in_mpix_ = 0, out_mpix_ = 0;
  // the image in progress between its steps (in the arena until the next image's stage 0)
  int phase_ = 0;
  Image8 in_;
  float* img_ = nullptr;
  std::size_t in_bytes_ = 0;
};

void JpegImageLane::load(const std::string& state) {
  try {
    const auto j = nlohmann::json::parse(state);
    std::size_t next = j.at("next").get<std::size_t>();
    if (j.contains("next_file")) {  // resume at that file even if the directory has changed
      const auto file = j["next_file"].get<std::string>();
      const auto it = std::find(files_.begin(), files_.end(), file);
      if (it == files_.end())
        throw LaneError("jpegimage: saved state resumes at '" + file + "', which is no longer in " + input_dir_);
      next = static_cast<std::size_t>(it - files_.begin());
    } else if (next > total()) {
      throw LaneError("jpegimage: saved state is at image " + std::to_string(next) + " of " +
                      std::to_string(j.at("total").get<std::size_t>()) + ", this run has " + std::to_string(total()));
    }
    next_ = next;
    phase_ = 0;  // an image saved part-way is done again from its start
    done_ = j.at("images_done").get<std::uint64_t>();
    in_mpix_ = j.at("input_megapixels").get<double>();
    out_mpix_ = j.at("output_megapixels").get<double>();
    bytes_read_ = j.at("bytes_read").get<std::uint64_t>();
    bytes_written_ = j.at("bytes_written").get<std::uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw LaneError(std::string("jpegimage: cannot load saved state: ") + e.what());
  }
}

}  // namespace

std::unique_ptr<Lane> make_jpegimage_lane() { return std::make_unique<JpegImageLane>(); }

}  // namespace pipelane
