#include "lanes/builtin/jpeg_codec.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>

namespace pipelane::jpeg {
namespace {

// libjpeg reports a fatal error through error_exit, which must not return: it longjmps back to
// the call below. No C++ object with a destructor lives between the setjmp and the longjmp.
struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void silent_output(j_common_ptr) {}

// libjpeg only warns about corrupt data (a stream cut short is padded with gray, extraneous bytes
// are skipped) and carries on; a lane's output from a damaged input would be garbage, so a warning
// (level -1) is an error here. Trace messages (level >= 0) are ignored.
void strict_emit(j_common_ptr cinfo, int level) {
  if (level < 0) error_exit(cinfo);
}

void install(ErrorManager& err, jpeg_common_struct* cinfo) {
  cinfo->err = jpeg_std_error(&err.base);
  err.base.error_exit = error_exit;
  err.base.output_message = silent_output;
  err.base.emit_message = strict_emit;
  err.message[0] = '\0';
}

// Header only: size and channels, so the caller can allocate. Returns false with err.message set.
bool read_header(jpeg_decompress_struct& cinfo, ErrorManager& err, const std::uint8_t* data, std::size_t size,
                 int& channels) {
  if (setjmp(err.jump)) return false;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    std::snprintf(err.message, sizeof err.message, "CMYK JPEGs are not supported");
    return false;
  }
  cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  channels = cinfo.output_components;
  return true;
}

bool read_pixels(jpeg_decompress_struct& cinfo, ErrorManager& err, std::uint8_t* out) {
  if (setjmp(err.jump)) return false;
  const std::size_t row = static_cast<std::size_t>(cinfo.output_width) * cinfo.output_components;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rows[1] = {out + cinfo.output_scanline * row};
    jpeg_read_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

bool write_jpeg(const imageproc::Image8& image, int quality, ErrorManager& err, unsigned char** buffer,
                unsigned long* size) {
  jpeg_compress_struct cinfo;
  install(err, reinterpret_cast<jpeg_common_struct*>(&cinfo));
  jpeg_create_compress(&cinfo);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_mem_dest(&cinfo, buffer, size);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = image.channels;
  cinfo.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const std::size_t row = static_cast<std::size_t>(image.width) * image.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW rows[1] = {image.data + cinfo.next_scanline * row};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

}  // namespace

imageproc::Image8 decode(const std::uint8_t* data, std::size_t size, const std::string& name, Arena& arena) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  install(err, reinterpret_cast<jpeg_common_struct*>(&cinfo));
  jpeg_create_decompress(&cinfo);
  int channels = 0;
  if (!read_header(cinfo, err, data, size, channels)) {
    jpeg_destroy_decompress(&cinfo);
    throw LaneError("jpegimage: " + name + ": not a JPEG it can decode: " + err.message);
  }
  imageproc::Image8 image{static_cast<int>(cinfo.output_width), static_cast<int>(cinfo.output_height), channels,
                          nullptr};
  try {
    image.data = arena.allocate_n<std::uint8_t>(
        static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height) * channels, "decoded JPEG");
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  const bool ok = read_pixels(cinfo, err, image.data);
  jpeg_destroy_decompress(&cinfo);
  if (!ok) throw LaneError("jpegimage: " + name + ": corrupt JPEG: " + err.message);
  return image;
}

std::string encode(const imageproc::Image8& image, int quality, const std::string& name) {
  ErrorManager err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const bool ok = write_jpeg(image, quality, err, &buffer, &size);
  std::string out = ok ? std::string(reinterpret_cast<const char*>(buffer), size) : std::string();
  std::free(buffer);  // jpeg_mem_dest's buffer is malloc'ed by libjpeg
  if (!ok) throw LaneError("jpegimage: " + name + ": JPEG encode failed: " + err.message);
  return out;
}

std::string library_version() {
  std::string v = "libjpeg API " + std::to_string(JPEG_LIB_VERSION);
#ifdef LIBJPEG_TURBO_VERSION
#define PIPELANE_STR2(x) #x
#define PIPELANE_STR(x) PIPELANE_STR2(x)
  v = std::string("libjpeg-turbo ") + PIPELANE_STR(LIBJPEG_TURBO_VERSION) + " (" + v + ")";
#endif
  return v;
}

}  // namespace pipelane::jpeg
