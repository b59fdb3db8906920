#include "trainer/checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

namespace pipelane {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw FileError(path + ": " + what + " (" + std::strerror(err) + ")");
}

// write(2) until every byte is out; a short write is retried once more to get its errno (ENOSPC,
// EFBIG past a file size limit, EDQUOT).
void write_all(int fd, const std::string& path, std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot write", errno);
    }
    if (n == 0) fail(path, "cannot write", ENOSPC);
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

int open_for_writing(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
  if (fd < 0) fail(path, "cannot create", errno);
  return fd;
}

}  // namespace

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open to sync", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(path, "fsync failed", err);
}

void fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open to sync", errno);
  ::fsync(fd);  // some file systems refuse to sync directories; the rename itself is then all we get
  ::close(fd);
}

void rename_durably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail(to, "cannot rename into place", errno);
  fsync_directory(fs::path(to).parent_path().string());
}

void write_file_durably(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  try {
    const int fd = open_for_writing(tmp, O_TRUNC);
    try {
      write_all(fd, tmp, bytes);
      if (::fsync(fd) != 0) fail(tmp, "fsync failed", errno);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) fail(tmp, "cannot write", errno);
    rename_durably(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

void reserve_file_space(const std::string& path, std::uint64_t bytes) {
  const int fd = open_for_writing(path, O_TRUNC);
  const int rc = bytes > 0 ? ::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) : 0;
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EOPNOTSUPP && err != ENOSYS) {
    ::unlink(path.c_str());
    throw FileError(path + ": no room for its " + std::to_string(bytes) + " bytes (" + std::strerror(err) + ")");
  }
}

std::uint32_t crc32_of(std::string_view bytes, std::uint32_t crc) {
  // zlib takes a uInt length: feed large buffers in pieces.
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t left = bytes.size();
  uLong c = crc;
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    c = ::crc32(c, p, n);
    p += n;
    left -= n;
  }
  return static_cast<std::uint32_t>(c);
}

namespace {
// Hands every piece of the file at `path` to `take`, in order.
template <class Take>
void read_in_pieces(const std::string& path, Take&& take) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot read", errno);
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(path, "cannot read", err);
    }
    if (n == 0) break;
    take(std::string_view(buf.data(), static_cast<std::size_t>(n)));
  }
  ::close(fd);
}
}  // namespace

std::uint32_t file_crc32(const std::string& path) {
  std::uint32_t crc = 0;
  read_in_pieces(path, [&](std::string_view piece) { crc = crc32_of(piece, crc); });
  return crc;
}

std::string read_whole_file(const std::string& path) {
  std::string out;
  read_in_pieces(path, [&](std::string_view piece) { out.append(piece); });
  return out;
}

AppendFile::AppendFile(const std::string& path, bool truncate)
    : path_(path), fd_(open_for_writing(path, O_APPEND | (truncate ? O_TRUNC : 0))) {}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void AppendFile::append(std::string_view bytes) {
  if (fd_ < 0) throw FileError(path_ + ": not open");
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  try {
    write_all(fd_, path_, bytes);
  } catch (...) {
    // No half line left behind for the file's readers (best effort: the write error is the news).
    const int cut = before >= 0 ? ::ftruncate(fd_, before) : 0;
    (void)cut;
    throw;
  }
}

}  // namespace pipelane
