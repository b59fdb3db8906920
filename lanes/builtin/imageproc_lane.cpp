#include "lanes/builtin/imageproc_lane.h"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace pipelane {
namespace imageproc {
namespace {

constexpr std::size_t kMaxSide = 1 << 16;  // per-dimension sanity limit

// ---- decode -----------------------------------------------------------------------------------
struct File {
  std::FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

// Next header token of a PNM file (skips whitespace and '#' comments). -1 on EOF / non-digit.
long pnm_int(std::FILE* f) {
  int c = std::fgetc(f);
  for (;;) {
    if (c == '#') {
      while (c != EOF && c != '\n') c = std::fgetc(f);
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      c = std::fgetc(f);
    } else {
      break;
    }
  }
  if (c < '0' || c > '9') return -1;
  long v = 0;
  while (c >= '0' && c <= '9') {
    v = v * 10 + (c - '0');
    if (v > 1000000000L) return -1;
    c = std::fgetc(f);
  }
  // exactly one whitespace byte follows the last header value; it was consumed by fgetc above
  if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return -1;
  return v;
}

Image8 decode_pnm(const std::string& path, std::FILE* f, int channels, Arena& arena) {
  const long w = pnm_int(f), h = pnm_int(f), maxval = pnm_int(f);
  if (w <= 0 || h <= 0 || maxval <= 0 || maxval > 65535)
    throw LaneError("imageproc: " + path + ": corrupt PNM header (width, height, maxval)");
  if (static_cast<std::size_t>(w) > kMaxSide || static_cast<std::size_t>(h) > kMaxSide)
    throw LaneError("imageproc: " + path + ": " + std::to_string(w) + "x" + std::to_string(h) +
                    " is larger than " + std::to_string(kMaxSide) + " per side");
  const std::size_t samples = static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * channels;
  const std::size_t bps = maxval > 255 ? 2 : 1;
  Image8 img{static_cast<int>(w), static_cast<int>(h), channels, nullptr};
  img.data = arena.allocate_n<std::uint8_t>(samples * bps, "decoded image");
  if (std::fread(img.data, 1, samples * bps, f) != samples * bps)
    throw LaneError("imageproc: " + path + ": truncated pixel data (expected " +
                    std::to_string(samples * bps) + " bytes)");
  if (bps == 2) {  // big-endian 16-bit samples -> 8-bit, in place (index i reads 2i, 2i+1)
    for (std::size_t i = 0; i < samples; ++i) {
      const unsigned v = (unsigned{img.data[2 * i]} << 8) | img.data[2 * i + 1];
      img.data[i] = static_cast<std::uint8_t>(std::min<unsigned>(255, (v * 255u + maxval / 2) / maxval));
    }
  } else if (maxval != 255) {
    for (std::size_t i = 0; i < samples; ++i)
      img.data[i] = static_cast<std::uint8_t>(std::min<unsigned>(255, (img.data[i] * 255u + maxval / 2) / maxval));
  }
  return img;
}

Image8 decode_png(const std::string& path, Arena& arena) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&png, path.c_str()))
    throw LaneError("imageproc: " + path + ": corrupt PNG: " + png.message);
  const bool color = (png.format & PNG_FORMAT_FLAG_COLOR) != 0;
  png.format = color ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  if (png.width > kMaxSide || png.height > kMaxSide) {
    png_image_free(&png);
    throw LaneError("imageproc: " + path + ": " + std::to_string(png.width) + "x" +
                    std::to_string(png.height) + " is larger than " + std::to_string(kMaxSide) + " per side");
  }
  Image8 img{static_cast<int>(png.width), static_cast<int>(png.height), color ? 3 : 1, nullptr};
  try {
    img.data = arena.allocate_n<std::uint8_t>(PNG_IMAGE_SIZE(png), "decoded image");
  } catch (...) {
    png_image_free(&png);
    throw;
  }
  png_color white{255, 255, 255};  // alpha is composited over white
  if (!png_image_finish_read(&png, &white, img.data, 0, nullptr)) {
    const std::string msg = png.message;
    png_image_free(&png);
    throw LaneError("imageproc: " + path + ": corrupt PNG: " + msg);
  }
  return img;
}

// ---- processing -------------------------------------------------------------------------------
template <typename T>
void resize_impl(const T* src, int sw, int sh, int c, float* dst, int dw, int dh) {
  const float sx = static_cast<float>(sw) / dw, sy = static_cast<float>(sh) / dh;
  for (int y = 0; y < dh; ++y) {
    float fy = (y + 0.5f) * sy - 0.5f;
    fy = std::clamp(fy, 0.0f, static_cast<float>(sh - 1));
    const int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, sh - 1);
    const float wy = fy - y0;
    const T* r0 = src + static_cast<std::size_t>(y0) * sw * c;
    const T* r1 = src + static_cast<std::size_t>(y1) * sw * c;
    float* out = dst + static_cast<std::size_t>(y) * dw * c;
    for (int x = 0; x < dw; ++x) {
      float fx = (x + 0.5f) * sx - 0.5f;
      fx = std::clamp(fx, 0.0f, static_cast<float>(sw - 1));
      const int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, sw - 1);
      const float wx = fx - x0;
      for (int k = 0; k < c; ++k) {
        const float top = static_cast<float>(r0[x0 * c + k]) * (1 - wx) + static_cast<float>(r0[x1 * c + k]) * wx;
        const float bot = static_cast<float>(r1[x0 * c + k]) * (1 - wx) + static_cast<float>(r1[x1 * c + k]) * wx;
        out[x * c + k] = top * (1 - wy) + bot * wy;
      }
    }
  }
}

// Separable blur with clamped edges: img -> tmp (horizontal) -> img (vertical).
void blur(float* img, float* tmp, int w, int h, int c, int radius, bool gaussian) {
  std::vector<float> k(2 * radius + 1);
  const float sigma = std::max(0.5f, radius / 2.0f);
  float sum = 0;
  for (int i = -radius; i <= radius; ++i) {
    k[i + radius] = gaussian ? std::exp(-0.5f * i * i / (sigma * sigma)) : 1.0f;
    sum += k[i + radius];
  }
  for (float& v : k) v /= sum;
  for (int y = 0; y < h; ++y) {
    const float* row = img + static_cast<std::size_t>(y) * w * c;
    float* out = tmp + static_cast<std::size_t>(y) * w * c;
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) {
        float acc = 0;
        for (int i = -radius; i <= radius; ++i) acc += k[i + radius] * row[std::clamp(x + i, 0, w - 1) * c + ch];
        out[x * c + ch] = acc;
      }
  }
  const std::size_t stride = static_cast<std::size_t>(w) * c;
  for (int y = 0; y < h; ++y) {
    float* out = img + y * stride;
    for (std::size_t xc = 0; xc < stride; ++xc) {
      float acc = 0;
      for (int i = -radius; i <= radius; ++i) acc += k[i + radius] * tmp[std::clamp(y + i, 0, h - 1) * stride + xc];
      out[xc] = acc;
    }
  }
}

// 5x7 bitmap font, one byte per row, bit 4 = leftmost column.
struct Glyph {
  char ch;
  std::uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {' ', {0, 0, 0, 0, 0, 0, 0}},                      {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},
    {'-', {0, 0, 0, 0x1F, 0, 0, 0}},                   {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},          {'/', {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}},
};
constexpr std::uint8_t kBox[7] = {0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F};

const std::uint8_t* glyph(char ch) {
  if (ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 'a' + 'A');
  for (const Glyph& g : kFont)
    if (g.ch == ch) return g.rows;
  return kBox;
}

}  // namespace

// Bottom-right text: a dark plate blended at opacity/2, then white glyphs blended at opacity.
void watermark(float* img, int w, int h, int c, const std::string& text, float opacity) {
  if (text.empty() || opacity <= 0) return;
  const int s = std::max(1, std::min(w, h) / 80);
  const int tw = static_cast<int>(text.size()) * 6 * s - s, th = 7 * s, pad = s, margin = 2 * s;
  const int x0 = w - margin - tw, y0 = h - margin - th;
  auto blend = [&](int x, int y, float target, float a) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    float* p = img + (static_cast<std::size_t>(y) * w + x) * c;
    for (int k = 0; k < c; ++k) p[k] = p[k] * (1 - a) + target * a;
  };
  for (int y = y0 - pad; y < y0 + th + pad; ++y)
    for (int x = x0 - pad; x < x0 + tw + pad; ++x) blend(x, y, 0.0f, opacity * 0.5f);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const std::uint8_t* rows = glyph(text[i]);
    const int gx = x0 + static_cast<int>(i) * 6 * s;
    for (int r = 0; r < 7; ++r)
      for (int col = 0; col < 5; ++col)
        if (rows[r] & (0x10 >> col))
          for (int dy = 0; dy < s; ++dy)
            for (int dx = 0; dx < s; ++dx) blend(gx + col * s + dx, y0 + r * s + dy, 255.0f, opacity);
  }
}

namespace {

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// A synthetic RGB picture: a four-corner colour gradient, a few discs, light noise.
Image8 synthesize(int w, int h, std::uint64_t seed, std::uint64_t index, Arena& arena) {
  std::uint64_t s = seed * 0xD1B54A32D192ED03ull + index * 0x9E3779B97F4A7C15ull + 1;
  Image8 img{w, h, 3, arena.allocate_n<std::uint8_t>(static_cast<std::size_t>(w) * h * 3, "generated image")};
  float corner[4][3];
  for (auto& cc : corner)
    for (float& v : cc) v = static_cast<float>(splitmix(s) % 256);
  struct Disc { float x, y, r; std::uint8_t rgb[3]; };
  Disc discs[6];
  for (Disc& d : discs) {
    d.x = static_cast<float>(splitmix(s) % w);
    d.y = static_cast<float>(splitmix(s) % h);
    d.r = static_cast<float>(std::max(2, std::min(w, h) / 16) + static_cast<int>(splitmix(s) % std::max(1, std::min(w, h) / 5)));
    for (auto& v : d.rgb) v = static_cast<std::uint8_t>(splitmix(s));
  }
  for (int y = 0; y < h; ++y) {
    const float fy = h > 1 ? static_cast<float>(y) / (h - 1) : 0.0f;
    for (int x = 0; x < w; ++x) {
      const float fx = w > 1 ? static_cast<float>(x) / (w - 1) : 0.0f;
      std::uint8_t* p = img.data + (static_cast<std::size_t>(y) * w + x) * 3;
      for (int k = 0; k < 3; ++k) {
        const float v = (corner[0][k] * (1 - fx) + corner[1][k] * fx) * (1 - fy) +
                        (corner[2][k] * (1 - fx) + corner[3][k] * fx) * fy;
        p[k] = static_cast<std::uint8_t>(v);
      }
      for (const Disc& d : discs)
        if ((x - d.x) * (x - d.x) + (y - d.y) * (y - d.y) <= d.r * d.r) std::memcpy(p, d.rgb, 3);
      const int noise = static_cast<int>(splitmix(s) % 9) - 4;
      for (int k = 0; k < 3; ++k) p[k] = static_cast<std::uint8_t>(std::clamp(p[k] + noise, 0, 255));
    }
  }
  return img;
}

Image8 decode_image(const std::string& path, Arena& arena) {
  File file;
  file.f = std::fopen(path.c_str(), "rb");
  if (!file.f) throw LaneError("imageproc: cannot open " + path + ": " + std::strerror(errno));
  unsigned char magic[8] = {};
  const std::size_t got = std::fread(magic, 1, 8, file.f);
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (got == 8 && std::memcmp(magic, kPng, 8) == 0) {
    std::fclose(file.f);
    file.f = nullptr;
    return decode_png(path, arena);
  }
  if (got >= 3 && magic[0] == 'P' && (magic[1] == '5' || magic[1] == '6')) {
    std::fseek(file.f, 2, SEEK_SET);
    return decode_pnm(path, file.f, magic[1] == '6' ? 3 : 1, arena);
  }
  throw LaneError("imageproc: " + path + ": not a PNG, binary PPM (P6) or binary PGM (P5) image");
}

namespace {

struct PngError {
  char message[256];
};

[[noreturn]] void png_error_fn(png_structp png, png_const_charp msg) {
  auto* e = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(e->message, sizeof e->message, "%s", msg);
  png_longjmp(png, 1);
}
void png_warning_fn(png_structp, png_const_charp) {}

// libpng's setjmp error handling: no object with a destructor lives in this frame.
bool write_png_file(const char* path, const Image8& image, int level, PngError* err) {
  std::FILE* f = std::fopen(path, "wb");
  if (!f) {
    std::snprintf(err->message, sizeof err->message, "%s", std::strerror(errno));
    return false;
  }
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, err, png_error_fn, png_warning_fn);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    std::snprintf(err->message, sizeof err->message, "out of memory");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    return false;
  }
  png_init_io(png, f);
  png_set_compression_level(png, level);
  if (level <= 3) png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);  // cheap and decent
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               image.channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const std::size_t stride = static_cast<std::size_t>(image.width) * image.channels;
  for (int y = 0; y < image.height; ++y) png_write_row(png, image.data + y * stride);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  if (std::fclose(f) != 0) {
    std::snprintf(err->message, sizeof err->message, "%s", std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

void encode_png(const std::string& path, const Image8& image, int compression_level) {
  PngError err{};
  if (!write_png_file(path.c_str(), image, compression_level, &err))
    throw LaneError("imageproc: cannot write " + path + ": " + err.message);
}

void encode_pnm(const std::string& path, const Image8& image) {
  File file;
  file.f = std::fopen(path.c_str(), "wb");
  if (!file.f) throw LaneError("imageproc: cannot write " + path + ": " + std::strerror(errno));
  std::fprintf(file.f, "P%c\n%d %d\n255\n", image.channels == 3 ? '6' : '5', image.width, image.height);
  const std::size_t n = static_cast<std::size_t>(image.width) * image.height * image.channels;
  const bool ok = std::fwrite(image.data, 1, n, file.f) == n;
  const int rc = std::fclose(file.f);
  file.f = nullptr;
  if (!ok || rc != 0) throw LaneError("imageproc: error writing " + path);
}

void resize_bilinear(const float* src, int src_w, int src_h, int channels, float* dst, int dst_w,
                     int dst_h) {
  resize_impl(src, src_w, src_h, channels, dst, dst_w, dst_h);
}

}  // namespace imageproc

namespace {

using namespace imageproc;

class ImageProcLane final : public Lane {
 public:
  std::string name() const override { return "imageproc"; }
  std::string work_unit() const override { return "images"; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    input_dir_ = o.get_string("input_dir", "");
    generate_ = o.get_int("generate", 0, 0, 100000000);
    width_ = static_cast<int>(o.get_int("width", 640, 1, kMaxSide));
    height_ = static_cast<int>(o.get_int("height", 480, 1, kMaxSide));
    seed_ = static_cast<std::uint64_t>(o.get_int("seed", 1, 0, INT64_MAX));
    out_w_ = static_cast<int>(o.get_int("out_width", 320, 1, kMaxSide));
    out_h_ = static_cast<int>(o.get_int("out_height", 240, 1, kMaxSide));
    blur_ = static_cast<int>(o.get_int("blur", 1, 0, 64));
    const std::string kind = o.get_string("blur_kind", "gaussian");
    watermark_ = o.get_string("watermark", "PIPELANE");
    opacity_ = static_cast<float>(o.get_double("watermark_opacity", 0.5, 0.0, 1.0));
    format_ = o.get_string("format", "png");
    png_level_ = static_cast<int>(o.get_int("png_compression", 1, 0, 9));
    steps_per_image_ = static_cast<int>(o.get_int("steps_per_image", 3, 1, 3));
    o.reject_unknown();
    if (kind != "gaussian" && kind != "box")
      throw LaneError("[lane.imageproc] blur_kind = '" + kind + "': expected gaussian or box");
    gaussian_ = kind == "gaussian";
    if (format_ != "png" && format_ != "ppm")
      throw LaneError("[lane.imageproc] format = '" + format_ + "': expected png or ppm");
    if (input_dir_.empty() == (generate_ == 0))
      throw LaneError("[lane.imageproc]: set exactly one of 'input_dir = DIR' or 'generate = N'");
    output_dir_ = ctx.output_dir;
    files_.clear();
    if (!input_dir_.empty()) {
      std::error_code ec;
      std::filesystem::directory_iterator it(input_dir_, ec), end;
      if (ec) throw LaneError("imageproc: cannot list input_dir '" + input_dir_ + "': " + ec.message());
      for (; it != end; it.increment(ec)) {
        if (ec) throw LaneError("imageproc: cannot list input_dir '" + input_dir_ + "': " + ec.message());
        if (!it->is_regular_file(ec)) continue;
        std::string ext = it->path().extension().string();
        for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (ext == ".png" || ext == ".ppm" || ext == ".pgm" || ext == ".pnm")
          files_.push_back(it->path().filename().string());
      }
      std::sort(files_.begin(), files_.end());
      if (files_.empty())
        throw LaneError("imageproc: input_dir '" + input_dir_ + "' has no .png/.ppm/.pgm/.pnm images");
    }
  }

  // One image in steps_per_image_ steps (1: whole; 3: read + resize | blur + watermark | encode),
  // each returning its share of the image, so a step fits a pipeline gap of a third the size. The
  // image in progress lives in the arena between its steps; the output is the same either way.
  double step(LaneContext& ctx) override {
    if (finished()) return 0.0;
    Arena& arena = ctx.arena;
    const int phases = steps_per_image_;
    const int first = phase_ * 3 / phases, last = (phase_ + 1) * 3 / phases;  // stages [first, last)
    try {
      for (int stage = first; stage < last; ++stage) run_stage(stage, arena);
    } catch (const ArenaQuotaError& e) {
      phase_ = 0;
      throw LaneError("imageproc: " + source_name() + " does not fit the lane's memory quota: " + e.what());
    } catch (...) {
      phase_ = 0;  // a retry (after load()) starts the image over
      throw;
    }
    const double share = static_cast<double>(last - first) / 3.0;
    if (++phase_ == phases) {
      phase_ = 0;
      ++next_;
      ++done_;
    }
    return share;
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
    j["bytes_written"] = bytes_written_;
    return j.dump();
  }

  void load(const std::string& state) override {
    try {
      const auto j = nlohmann::json::parse(state);
      std::size_t next = j.at("next").get<std::size_t>();
      if (j.contains("next_file")) {  // resume at that file even if the directory has changed
        const auto name = j["next_file"].get<std::string>();
        const auto it = std::find(files_.begin(), files_.end(), name);
        if (it == files_.end())
          throw LaneError("imageproc: saved state resumes at '" + name + "', which is no longer in " + input_dir_);
        next = static_cast<std::size_t>(it - files_.begin());
      } else if (next > total()) {
        throw LaneError("imageproc: saved state is at image " + std::to_string(next) + " of " +
                        std::to_string(j.at("total").get<std::size_t>()) + ", this run has " +
                        std::to_string(total()));
      }
      next_ = next;
      phase_ = 0;  // an image saved part-way is done again from its start
      done_ = j.at("images_done").get<std::uint64_t>();
      in_mpix_ = j.at("input_megapixels").get<double>();
      out_mpix_ = j.at("output_megapixels").get<double>();
      bytes_written_ = j.at("bytes_written").get<std::uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw LaneError(std::string("imageproc: cannot load saved state: ") + e.what());
    }
  }

  nlohmann::json report() const override {
    nlohmann::json j;
    j["source"] = input_dir_.empty() ? "generated " + std::to_string(width_) + "x" + std::to_string(height_)
                                     : input_dir_;
    j["images_total"] = total();
    j["images_done"] = done_;
    j["input_megapixels"] = in_mpix_;
    j["output_megapixels"] = out_mpix_;
    j["output_size"] = std::to_string(out_w_) + "x" + std::to_string(out_h_);
    j["format"] = format_;
    j["bytes_written"] = bytes_written_;
    j["output_dir"] = output_dir_;
    return j;
  }

 private:
  std::size_t total() const { return input_dir_.empty() ? static_cast<std::size_t>(generate_) : files_.size(); }
  std::string source_name() const {
    return input_dir_.empty() ? "generated image " + std::to_string(next_) : input_dir_ + "/" + files_[next_];
  }

  // Stage 0: read (or generate) and resize; 1: blur and watermark; 2: quantize, encode, rename.
  void run_stage(int stage, Arena& arena) {
    if (stage == 0) {
      arena.reset();  // this lane keeps nothing else in its arena; every image starts empty
      const Image8 in = input_dir_.empty() ? synthesize(width_, height_, seed_, next_, arena)
                                           : decode_image(source_name(), arena);
      channels_ = in.channels;
      in_pixels_ = static_cast<double>(in.width) * in.height;
      const std::size_t n = static_cast<std::size_t>(out_w_) * out_h_ * channels_;
      img_ = arena.allocate_n<float>(n, "resized image");
      resize_impl(in.data, in.width, in.height, channels_, img_, out_w_, out_h_);
    } else if (stage == 1) {
      const std::size_t n = static_cast<std::size_t>(out_w_) * out_h_ * channels_;
      if (blur_ > 0) blur(img_, arena.allocate_n<float>(n, "blur buffer"), out_w_, out_h_, channels_, blur_, gaussian_);
      watermark(img_, out_w_, out_h_, channels_, watermark_, opacity_);
    } else {
      const std::size_t n = static_cast<std::size_t>(out_w_) * out_h_ * channels_;
      const std::string stem = input_dir_.empty() ? image_name(next_)
                                                  : std::filesystem::path(files_[next_]).stem().string();
      const std::string out = output_dir_ + "/" + stem + "." + format_;
      Image8 o8{out_w_, out_h_, channels_, arena.allocate_n<std::uint8_t>(n, "encoded image")};
      for (std::size_t i = 0; i < n; ++i)
        o8.data[i] = static_cast<std::uint8_t>(std::clamp(std::lround(img_[i]), 0L, 255L));
      const std::string tmp = out + ".tmp";
      if (format_ == "png") encode_png(tmp, o8, png_level_);
      else encode_pnm(tmp, o8);
      std::error_code ec;
      std::filesystem::rename(tmp, out, ec);
      if (ec) throw LaneError("imageproc: cannot rename " + tmp + " to " + out + ": " + ec.message());
      in_mpix_ += in_pixels_ / 1e6;
      out_mpix_ += static_cast<double>(out_w_) * out_h_ / 1e6;
      bytes_written_ += std::filesystem::file_size(out, ec);
    }
  }
  static std::string image_name(std::size_t i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "image_%06zu", i);
    return buf;
  }

  std::string input_dir_, output_dir_, watermark_, format_;
  std::int64_t generate_ = 0;
  int width_ = 640, height_ = 480, out_w_ = 320, out_h_ = 240, blur_ = 1, png_level_ = 1;
  bool gaussian_ = true;
  float opacity_ = 0.5f;
  std::uint64_t seed_ = 1;
  std::vector<std::string> files_;
  std::size_t next_ = 0;
  int steps_per_image_ = 3;
  // The image in progress between its steps (in the arena until the next image's stage 0).
  int phase_ = 0, channels_ = 0;
  float* img_ = nullptr;
  double in_pixels_ = 0;
  std::uint64_t done_ = 0, bytes_written_ = 0;
  double in_mpix_ = 0, out_mpix_ = 0;
};

}  // namespace

std::unique_ptr<Lane> make_imageproc_lane() { return std::make_unique<ImageProcLane>(); }

}  // namespace pipelane
