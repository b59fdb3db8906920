// JPEG decode and encode through libjpeg-turbo (Debian's libjpeg62-turbo), for the jpegimage
// lane. Errors come back as LaneErrors naming the file (libjpeg's own message included); the
// decoder's pixels come from an Arena, like every image buffer of the image lanes.
#pragma once
#include <cstdint>
#include <string>

#include "lanes/builtin/imageproc_lane.h"
#include "runtime/arena.h"

namespace pipelane::jpeg {

// Decodes `size` bytes of a baseline or progressive JPEG into 8-bit gray (1 channel) or RGB (3)
// pixels in `arena`. `name` is the file (or "generated image N") for errors. CMYK is refused, and
// so is a stream libjpeg would only warn about (cut short, corrupt entropy data).
imageproc::Image8 decode(const std::uint8_t* data, std::size_t size, const std::string& name, Arena& arena);

// Encodes gray or RGB pixels at `quality` (1..100, 4:2:0 chroma for colour) into memory.
std::string encode(const imageproc::Image8& image, int quality, const std::string& name);

// "libjpeg-turbo 2.1.5 (libjpeg API 62)", what the summary names.
std::string library_version();

}  // namespace pipelane::jpeg
