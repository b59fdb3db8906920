#include "lanes/builtin/cnn/image_source.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "lanes/builtin/cnn/cnn_cost.h"
#include "lanes/builtin/cnn/cnn_random.h"
#include "lanes/builtin/imageproc_lane.h"
#include "lanes/builtin/jpeg_codec.h"

namespace pipelane::cnn {
namespace {

namespace fs = std::filesystem;

// The two random streams of an image: its class's template and its own noise.
struct SyntheticStreams {
  std::uint64_t class_base, image_base;
};

SyntheticStreams synthetic_streams(std::uint64_t seed, int classes, std::int64_t image) {
  const std::uint64_t label = static_cast<std::uint64_t>(image % classes);
  return {stream_base(seed, name_key("synthetic.class") ^ mix64(label)),
          stream_base(seed, name_key("synthetic.image") ^ mix64(static_cast<std::uint64_t>(image)))};
}

float synthetic_value(const SyntheticStreams& s, int size, int c, int y, int x) {
  const std::uint64_t idx = (static_cast<std::uint64_t>(c) * size + y) * size + x;
  const double t = 2.0 * uniform01_at(s.class_base, idx) - 1.0, z = 2.0 * uniform01_at(s.image_base, idx) - 1.0;
  return static_cast<float>(0.5 * t + 0.5 * z);
}

class SyntheticSource final : public ImageSource {
 public:
  SyntheticSource(int size, int classes, std::int64_t images, std::uint64_t seed)
      : size_(size), classes_(classes), images_(images), seed_(seed) {}
  void load(std::int64_t position, float* pixels, std::int32_t* label) override {
    const std::int64_t image = position % images_;
    const SyntheticStreams streams = synthetic_streams(seed_, classes_, image);
    for (int y = 0; y < size_; ++y)
      for (int x = 0; x < size_; ++x)
        for (int c = 0; c < 3; ++c)
          pixels[(static_cast<std::size_t>(y) * size_ + x) * 3 + c] = synthetic_value(streams, size_, c, y, x);
    *label = static_cast<std::int32_t>(image % classes_);
  }
  std::string describe() const override {
    return "synthetic: " + std::to_string(images_) + " images, " + std::to_string(classes_) + " classes";
  }

 private:
  int size_, classes_;
  std::int64_t images_;
  std::uint64_t seed_;
};

// One block of the lane's arena, handed out as the whole reservation of a decode arena that is
// reset for every image.
class BlockResource final : public MemoryResource {
 public:
  BlockResource(void* block, std::size_t bytes) : block_(block), bytes_(bytes) {}
  MemoryKind kind() const override { return MemoryKind::Host; }
  void* reserve(std::size_t bytes, std::size_t) override { return bytes <= bytes_ ? block_ : nullptr; }
  void release(void*) override {}
  void zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }

 private:
  void* block_;
  std::size_t bytes_;
};

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".ppm" || ext == ".pgm";
}

std::vector<std::string> sorted_images(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && is_image(it->path())) files.push_back(it->path().string());
  if (ec) throw LaneError("cannot list '" + dir.string() + "': " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

class FolderSource final : public ImageSource {
 public:
  FolderSource(const std::string& dir, int size, int classes, std::uint64_t seed, Arena& arena, std::size_t decode_bytes)
      : dir_(dir), size_(size), seed_(seed),
        block_(arena.allocate(decode_bytes, "image decoding"), decode_bytes),
        decode_arena_("image decoding", decode_bytes, block_) {
    std::vector<std::string> class_dirs;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec)) class_dirs.push_back(it->path().string());
    if (ec) throw LaneError("input_dir '" + dir + "': cannot list it: " + ec.message());
    std::sort(class_dirs.begin(), class_dirs.end());
    if (class_dirs.empty()) {
      for (const std::string& f : sorted_images(dir)) {
        files_.push_back(f);
        labels_.push_back(static_cast<std::int32_t>((files_.size() - 1) % classes));
      }
    } else {
      if (static_cast<int>(class_dirs.size()) > classes)
        throw LaneError("input_dir '" + dir + "' has " + std::to_string(class_dirs.size()) +
                        " class folders, more than classes = " + std::to_string(classes));
      for (std::size_t k = 0; k < class_dirs.size(); ++k)
        for (const std::string& f : sorted_images(class_dirs[k])) {
          files_.push_back(f);
          labels_.push_back(static_cast<std::int32_t>(k));
        }
    }
    if (files_.empty()) throw LaneError("input_dir '" + dir + "' has no .jpg/.jpeg/.png/.ppm/.pgm images");
  }

  void load(std::int64_t position, float* pixels, std::int32_t* label) override {
    const std::int64_t count = static_cast<std::int64_t>(files_.size());
    const std::size_t k = order(position / count)[static_cast<std::size_t>(position % count)];
    decode(files_[k], pixels);
    *label = labels_[k];
  }
  std::string describe() const override {
    return dir_ + ": " + std::to_string(files_.size()) + " images";
  }

 private:
  const std::vector<std::uint32_t>& order(std::int64_t epoch) {
    if (epoch == epoch_) return perm_;
    perm_.resize(files_.size());
    for (std::size_t i = 0; i < perm_.size(); ++i) perm_[i] = static_cast<std::uint32_t>(i);
    const std::uint64_t key = name_key("epoch") ^ mix64(static_cast<std::uint64_t>(epoch));
    for (std::size_t i = perm_.size(); i > 1; --i)
      std::swap(perm_[i - 1], perm_[mix64(mix64(seed_ ^ key) + i) % i]);
    epoch_ = epoch;
    return perm_;
  }

  void decode(const std::string& path, float* pixels) {
    decode_arena_.reset();
    imageproc::Image8 img;
    try {
      const std::string ext = fs::path(path).extension().string();
      if (ext == ".png" || ext == ".PNG" || ext == ".ppm" || ext == ".PPM" || ext == ".pgm" || ext == ".PGM") {
        img = imageproc::decode_image(path, decode_arena_);
      } else {
        std::ifstream in(path, std::ios::binary);
        if (!in) throw LaneError("cannot open " + path);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        img = jpeg::decode(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), path, decode_arena_);
      }
      const std::size_t n = static_cast<std::size_t>(img.width) * img.height * img.channels;
      float* src = decode_arena_.allocate_n<float>(n, "decoded pixels");
      for (std::size_t i = 0; i < n; ++i) src[i] = img.data[i];
      float* dst = decode_arena_.allocate_n<float>(static_cast<std::size_t>(size_) * size_ * img.channels, "resized");
      imageproc::resize_bilinear(src, img.width, img.height, img.channels, dst, size_, size_);
      static constexpr float kMean[3] = {0.485f, 0.456f, 0.406f}, kStd[3] = {0.229f, 0.224f, 0.225f};
      for (std::size_t p = 0; p < static_cast<std::size_t>(size_) * size_; ++p)
        for (int c = 0; c < 3; ++c) {
          const float v = dst[p * img.channels + (img.channels == 3 ? c : 0)] / 255.0f;
          pixels[p * 3 + c] = (v - kMean[c]) / kStd[c];
        }
    } catch (const ArenaQuotaError& e) {
      throw LaneError(path + " does not fit decode_mb: " + e.what());
    }
  }

  std::string dir_;
  int size_;
  std::uint64_t seed_;
  BlockResource block_;
  Arena decode_arena_;
  std::vector<std::string> files_;
  std::vector<std::int32_t> labels_;
  std::int64_t epoch_ = -1;
  std::vector<std::uint32_t> perm_;
};

}  // namespace

// Two hashes per value; a decode and resize, about 64 loop touches per output value.
double synthetic_cost_per_image(int size) { return 2 * kElementCost * 3.0 * size * size; }
double folder_cost_per_image(int size) { return 64 * kElementCost * 3.0 * size * size; }

float synthetic_pixel(std::uint64_t seed, int classes, std::int64_t image, int size, int c, int y, int x) {
  return synthetic_value(synthetic_streams(seed, classes, image), size, c, y, x);
}

std::unique_ptr<ImageSource> make_synthetic_source(int size, int classes, std::int64_t images, std::uint64_t seed) {
  return std::make_unique<SyntheticSource>(size, classes, images, seed);
}

std::unique_ptr<ImageSource> make_folder_source(const std::string& dir, int size, int classes, std::uint64_t seed,
                                                Arena& arena, std::size_t decode_bytes) {
  return std::make_unique<FolderSource>(dir, size, classes, seed, arena, decode_bytes);
}

}  // namespace pipelane::cnn
