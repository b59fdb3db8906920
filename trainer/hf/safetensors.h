// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
// {"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// tensor bytes, offsets relative to the end of the header.
//
// Reading treats the file as untrusted: every size is bounded by the file's own size before
// anything is allocated, and a header that is malformed, truncated or whose offsets lie (past the
// end, overlapping, not matching dtype x shape) is one SafetensorsError naming the file and what
// is wrong. Tensors are read one at a time, so memory stays at one tensor beyond what the caller
// keeps.
#pragma once
#include "trainer/hf/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipelane {

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SafetensorInfo {
  std::string dtype;  // "F32", "F16", "BF16", "F64" (the float types read_f32 converts)
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets into the data section
  std::uint64_t numel() const;
};

// The header's limit: the reference implementation refuses headers above 100 MB.
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100u << 20;

class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);  // reads and checks the header
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor's elements as float32 (F16/BF16/F64 converted). SafetensorsError when absent or
  // the file changed under us.
  std::vector<float> read_f32(const std::string& name) const;

 private:
  std::string path_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, SafetensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorOut {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;  // F32
};

// Writes F32 tensors in the given order, the header padded to 8 bytes, under a temporary name
// renamed at the end. `metadata` goes to "__metadata__". std::runtime_error when it cannot write.
void write_safetensors(const std::string& path, const std::vector<SafetensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace pipelane
