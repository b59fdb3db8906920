#include "tests/golden/golden_file.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>

namespace pipelane::golden {

namespace {

constexpr char kMagic[8] = {'P', 'L', 'G', 'O', 'L', 'D', 'E', 'N'};
constexpr std::uint32_t kVersion = 1;
// Sanity limits that turn a corrupt header into a clear error instead of a huge allocation.
constexpr std::uint32_t kMaxNameLen = 4096;
constexpr std::uint32_t kMaxNdim = 16;

class Cursor {
 public:
  Cursor(const std::string& path, const std::vector<char>& data) : path_(path), data_(data) {}

  void read(void* dst, std::size_t n, const char* what) {
    if (n > data_.size() - pos_) {
      fail("truncated while reading " + std::string(what) + " at offset " + std::to_string(pos_) +
           " (need " + std::to_string(n) + " bytes, " + std::to_string(data_.size() - pos_) +
           " left)");
    }
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
  }
  // Values are stored little-endian; every supported target (x86-64, aarch64) is little-endian.
  std::uint32_t u32(const char* what) {
    std::uint32_t v;
    read(&v, sizeof v, what);
    return v;
  }
  std::int64_t i64(const char* what) {
    std::int64_t v;
    read(&v, sizeof v, what);
    return v;
  }
  std::size_t remaining() const { return data_.size() - pos_; }
  std::size_t pos() const { return pos_; }

  [[noreturn]] void fail(const std::string& msg) const {
    throw std::runtime_error("golden file '" + path_ + "': " + msg);
  }

 private:
  const std::string& path_;
  const std::vector<char>& data_;
  std::size_t pos_ = 0;
};

}  // namespace

std::int64_t Record::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}

GoldenFile GoldenFile::load(const std::string& path) {
  static_assert(sizeof(float) == 4, "f32 records need a 4-byte float");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("golden file '" + path + "': cannot open");
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("golden file '" + path + "': read error");

  Cursor cur(path, data);
  char magic[8];
  cur.read(magic, sizeof magic, "magic");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) {
    cur.fail("bad magic (expected \"PLGOLDEN\"); not a golden file");
  }
  const std::uint32_t version = cur.u32("version");
  if (version != kVersion) {
    cur.fail("unsupported version " + std::to_string(version) + " (this reader supports " +
             std::to_string(kVersion) + ")");
  }
  const std::uint32_t n_records = cur.u32("record count");

  GoldenFile file;
  for (std::uint32_t r = 0; r < n_records; ++r) {
    const std::string rec_what = "record " + std::to_string(r);
    Record rec;
    const std::uint32_t name_len = cur.u32("name length");
    if (name_len > kMaxNameLen) cur.fail(rec_what + ": implausible name length " + std::to_string(name_len));
    rec.name.resize(name_len);
    cur.read(rec.name.data(), name_len, "record name");
    const std::string where = rec_what + " '" + rec.name + "'";

    const std::uint32_t dtype = cur.u32("dtype");
    if (dtype != kDtypeF32 && dtype != kDtypeI32) {
      cur.fail(where + ": unknown dtype " + std::to_string(dtype));
    }
    rec.dtype = static_cast<int>(dtype);
    const std::uint32_t ndim = cur.u32("ndim");
    if (ndim > kMaxNdim) cur.fail(where + ": implausible ndim " + std::to_string(ndim));
    rec.dims.resize(ndim);
    std::int64_t numel = 1;
    for (std::uint32_t d = 0; d < ndim; ++d) {
      rec.dims[d] = cur.i64("dims");
      if (rec.dims[d] < 0) cur.fail(where + ": negative dimension");
      if (rec.dims[d] != 0 && numel > std::numeric_limits<std::int64_t>::max() / 4 / rec.dims[d]) {
        cur.fail(where + ": dimensions overflow");
      }
      numel *= rec.dims[d];
    }
    const std::size_t bytes = static_cast<std::size_t>(numel) * 4;
    if (bytes > cur.remaining()) {
      cur.fail("truncated in data of " + where + " at offset " + std::to_string(cur.pos()) +
               " (need " + std::to_string(bytes) + " bytes, " + std::to_string(cur.remaining()) +
               " left)");
    }
    if (rec.dtype == kDtypeF32) {
      rec.f32.resize(static_cast<std::size_t>(numel));
      cur.read(rec.f32.data(), bytes, "f32 data");
    } else {
      rec.i32.resize(static_cast<std::size_t>(numel));
      cur.read(rec.i32.data(), bytes, "i32 data");
    }
    if (file.index_.count(rec.name)) cur.fail(where + ": duplicate record name");
    file.index_.emplace(rec.name, file.records_.size());
    file.records_.push_back(std::move(rec));
  }
  if (cur.remaining() != 0) {
    cur.fail(std::to_string(cur.remaining()) + " trailing bytes after the last record");
  }
  return file;
}

const Record& GoldenFile::at(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range("golden file has no record '" + name + "'");
  return records_[it->second];
}

bool GoldenFile::has(const std::string& name) const { return index_.count(name) != 0; }

}  // namespace pipelane::golden
