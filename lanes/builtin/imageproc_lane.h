// imageproc: a batch image pipeline: decode, bilinear resize to out_width x out_height, blur,
// watermark, encode into ctx.output_dir. One image takes steps_per_image step()s, each returning
// its share of the image. Work unit: images (report() also counts input and output megapixels).
//
// [lane.imageproc] options
//   input_dir = DIR        images to process: *.ppm *.pgm *.pnm (binary P6/P5, maxval up to 65535)
//                          and *.png (any PNG; alpha is composited over white), sorted by name
//   generate = N           instead of input_dir: N synthetic images (deterministic per seed+index)
//   width = 640, height = 480   size of the generated images
//   seed = 1
//   out_width = 320, out_height = 240
//   blur = 1               blur radius in output pixels (0: none)     [0, 64]
//   blur_kind = gaussian   gaussian (sigma = radius/2, clamped edges) or box
//   watermark = PIPELANE   text stamped bottom-right (5x7 bitmap font: A-Z 0-9 space . - _ : /;
//                          lower case is drawn as upper case, other characters as a box; "" = none)
//   watermark_opacity = 0.5     [0, 1]
//   format = png           png or ppm (P6, or P5 for gray inputs)
//   png_compression = 1    zlib level 0-9 (levels <= 3 also use the cheap SUB filter only)
//   steps_per_image = 3    1: a step is a whole image; 3: read+resize | blur+watermark | encode
//                          (about a third each: a 640x480 image is ~8 ms whole, so three steps
//                          fit pipeline gaps three times finer; the outputs are identical)
//                          A checkpoint taken part-way through an image redoes that image.
//
// Outputs are OUTPUT_DIR/<input stem>.<png|ppm> (generated: image_NNNNNN.png), written to a
// .tmp file and renamed. Every pixel buffer comes from ctx.arena, which this lane recycles with
// Arena::reset() at the start of each image (it keeps nothing else there): an image too big for
// the quota is a LaneError naming the file. A corrupt image is a LaneError naming the file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_imageproc_lane();

namespace imageproc {

// 8-bit interleaved pixels, channels 1 (gray) or 3 (RGB), rows of width*channels bytes.
struct Image8 {
  int width = 0, height = 0, channels = 0;
  std::uint8_t* data = nullptr;
};

// Decodes a PNG, P5 or P6 file (chosen by its magic bytes) into arena memory.
// LaneError naming the file on corrupt or unsupported input; ArenaQuotaError if too big.
Image8 decode_image(const std::string& path, Arena& arena);
void encode_png(const std::string& path, const Image8& image, int compression_level = 1);  // zlib 0-9
void encode_pnm(const std::string& path, const Image8& image);  // P5 or P6, maxval 255

// Bilinear resize with half-pixel centres (as OpenCV INTER_LINEAR / PyTorch align_corners=false):
// source x = (dst_x + 0.5) * src_w / dst_w - 0.5, clamped to the image, likewise y.
void resize_bilinear(const float* src, int src_w, int src_h, int channels, float* dst, int dst_w,
                     int dst_h);

// Bottom-right text in a 5x7 bitmap font (the lane's `watermark`): a dark plate blended at
// opacity/2, then white glyphs at opacity, over float pixels 0..255.
void watermark(float* img, int w, int h, int c, const std::string& text, float opacity);
// The lane's `generate` pictures: RGB, a colour gradient with discs and light noise, a function of
// (seed, index) only.
Image8 synthesize(int w, int h, std::uint64_t seed, std::uint64_t index, Arena& arena);

}  // namespace imageproc
}  // namespace pipelane
