// Scratch files for the datasets tests: a temporary directory removed at the end of each test.
#pragma once
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <stdexcept>
#include <string>

#include "datasets/data_error.h"

namespace pipelane::test_support {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "pipelane-datasets-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline void write_gzip_file(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  if (!file) throw std::runtime_error("gzopen failed for " + path);
  const int written = gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  if (gzclose(file) != Z_OK || written != static_cast<int>(bytes.size()))
    throw std::runtime_error("cannot write " + path);
}

// The message of the DataError that `f` throws; "" when it throws none.
inline std::string data_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace pipelane::test_support
