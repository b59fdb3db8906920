// The images a CNN lane trains on: a stream of (pixels, label), image `position` of the stream
// being a function of the position alone (a resumed lane reloads exactly the images it needs).
//
// - synthetic: `images` images cycled in order; image i has label i mod classes and pixels
//   0.5 * T(label) + 0.5 * U(i), T and U uniform in [-1, 1) from cnn_random.h (a class template
//   plus noise: learnable, and reproducible bit for bit by the PyTorch reference).
// - a folder: *.jpg *.jpeg *.png *.ppm *.pgm, decoded (libjpeg-turbo, libpng: the image lanes'
//   decoders), resized bilinearly to size x size, gray made RGB, normalised with ImageNet's mean
//   and std as torchvision's recipes do. Subfolders are classes (torchvision's ImageFolder: sorted
//   names, label = index); a folder without subfolders has no labels, and image k (by name) gets
//   label k mod classes: for throughput, not accuracy. Every epoch is a permutation of the files
//   drawn from (seed, epoch). Decoding uses a block of the lane's arena (`decode_bytes`).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/arena.h"

namespace pipelane::cnn {

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  // NHWC floats (size x size x 3) and the label of image `position` of the stream.
  virtual void load(std::int64_t position, float* pixels, std::int32_t* label) = 0;
  virtual std::string describe() const = 0;   // for the report
};

// What loading one image costs, in FLOP-equivalents (cnn_cost.h), before a source exists.
double synthetic_cost_per_image(int size);
double folder_cost_per_image(int size);

std::unique_ptr<ImageSource> make_synthetic_source(int size, int classes, std::int64_t images, std::uint64_t seed);
// LaneError for a folder without images, more class folders than `classes`, an unreadable image.
std::unique_ptr<ImageSource> make_folder_source(const std::string& dir, int size, int classes, std::uint64_t seed,
                                                Arena& arena, std::size_t decode_bytes);

// The synthetic value of element (c, y, x) of image i, as the reference computes it.
float synthetic_pixel(std::uint64_t seed, int classes, std::int64_t image, int size, int c, int y, int x);

}  // namespace pipelane::cnn
