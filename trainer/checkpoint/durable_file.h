// Files that are never found half-written or silently short: the checkpoints' files and the run
// directory's. Every write is checked (a full disk is reported at the write that hit it, with the
// system's reason), small files are replaced atomically (NAME.tmp, fsync, rename, fsync of the
// directory) and a failed replacement removes its temporary file.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pipelane {

// One line naming the file and the system's reason ("No space left on device").
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// PATH.tmp written in full, fsync'd and renamed over PATH; the directory fsync'd. On failure the
// temporary file is removed and PATH is left as it was.
void write_file_durably(const std::string& path, std::string_view bytes);
void fsync_file(const std::string& path);
// Errors of fsync on a directory are ignored where the file system cannot sync directories.
void fsync_directory(const std::string& path);
void rename_durably(const std::string& from, const std::string& to);

// Makes `path` a file of `bytes` allocated bytes (fallocate), so that a full disk or a file size
// limit is found before a writer that cannot recover from a failed write starts (HDF5 1.10 is left
// broken by one). A file system without fallocate is not checked.
void reserve_file_space(const std::string& path, std::uint64_t bytes);

// zlib's CRC-32 (the one of gzip and PNG), of bytes or of a whole file.
std::uint32_t crc32_of(std::string_view bytes, std::uint32_t crc = 0);
std::uint32_t file_crc32(const std::string& path);
std::string read_whole_file(const std::string& path);

// An append-only text file whose every write is checked: a short write (full disk, file size
// limit) throws FileError at once instead of leaving a file that is found short at the end, and
// the file is cut back to where that write began (no half line).
class AppendFile {
 public:
  AppendFile() = default;
  // truncate: start empty; otherwise append to what is there.
  AppendFile(const std::string& path, bool truncate);
  ~AppendFile();
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  void append(std::string_view bytes);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace pipelane
