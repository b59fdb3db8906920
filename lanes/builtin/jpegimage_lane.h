// jpegimage: FreeRide's image job: JPEG decode, resize, watermark, JPEG encode, one image at a
// time into ctx.output_dir. FreeRide runs it with nvJPEG and NPP on the GPU; neither is available
// in this build, so the lane runs on the CPU through libjpeg-turbo (runs_on_device() is false,
// and the report's "device" says so). One image takes steps_per_image step()s, each returning its
// share of the image. Work unit: images.
//
// [lane.jpegimage] options
//   input_dir = DIR        JPEGs to process: *.jpg *.jpeg (any case; gray or colour, baseline or
//                          progressive), sorted by name
//   generate = N           instead of input_dir: N images, decoded from a pool of up to 16
//                          distinct synthetic pictures (imageproc's), JPEG-encoded once at setup
//                          (image i decodes picture i mod the pool): every step decodes real JPEG
//   width = 640, height = 480, seed = 1   the generated pictures
//   out_width = 320, out_height = 240     bilinear, half-pixel centres (imageproc's resize)
//   watermark = PIPELANE   text stamped bottom-right (imageproc's 5x7 font; "" = none)
//   watermark_opacity = 0.5     [0, 1]
//   quality = 85           JPEG quality of the outputs, 1..100 (4:2:0 chroma)
//   steps_per_image = 3    1: a step is a whole image; 3: decode | resize + watermark | encode +
//                          write (about a third each). A checkpoint taken part-way through an
//                          image redoes that image.
//
// Outputs are OUTPUT_DIR/<input stem>.jpg (generated: image_NNNNNN.jpg), written to a .tmp file
// and renamed. Pixel buffers come from ctx.arena, reset at the start of each image (the generated
// pool, a few hundred KiB of JPEG bytes, is host memory of the lane's own). A corrupt JPEG is a
// LaneError naming the file, and so is an image too big for the quota.
#pragma once
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_jpegimage_lane();

}  // namespace pipelane
