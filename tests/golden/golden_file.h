// Reader for the PLGOLDEN reference files written by tests/golden/make_gpt2_golden.py.
//
// Format (little-endian), version 1:
//   8 bytes magic "PLGOLDEN"; u32 version = 1; u32 n_records
//   each record: u32 name_len; name bytes (utf-8, no NUL); u32 dtype (0 = f32, 1 = i32);
//                u32 ndim; i64 dims[ndim]; raw data (numel * 4 bytes)
// See tests/golden/README.md for the records a file holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace pipelane::golden {

inline constexpr int kDtypeF32 = 0;
inline constexpr int kDtypeI32 = 1;

struct Record {
  std::string name;
  int dtype = kDtypeF32;             // kDtypeF32 or kDtypeI32
  std::vector<std::int64_t> dims;
  std::vector<float> f32;            // filled when dtype == kDtypeF32
  std::vector<std::int32_t> i32;     // filled when dtype == kDtypeI32
  std::int64_t numel() const;        // product of dims (1 for a scalar with ndim 0)
};

class GoldenFile {
 public:
  // Throws std::runtime_error (message names the file) on a missing file, bad magic,
  // unsupported version, unknown dtype, truncation, duplicate names or trailing bytes.
  static GoldenFile load(const std::string& path);

  // Throws std::out_of_range naming the missing record.
  const Record& at(const std::string& name) const;
  bool has(const std::string& name) const;
  const std::vector<Record>& records() const { return records_; }

 private:
  std::vector<Record> records_;
  std::unordered_map<std::string, std::size_t> index_;
};

// Relative error of a tensor as a whole: max |a - b| / max |b| (per-element ratios mean nothing
// for entries near zero). The golden tests' measure.
inline double relative_error(const float* a, const float* b, std::size_t n) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace pipelane::golden
