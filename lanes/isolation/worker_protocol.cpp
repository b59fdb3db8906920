#include "lanes/isolation/worker_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pipelane {
namespace {

struct FrameHeader {
  std::uint32_t op = 0;
  std::uint32_t sequence = 0;
  std::uint64_t size = 0;
};

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

FrameStatus read_all(int fd, char* data, std::size_t size,
                     const std::optional<std::chrono::steady_clock::time_point>& deadline, int watch_fd) {
  while (size > 0) {
    int timeout_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                            *deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return FrameStatus::Timeout;
      timeout_ms = static_cast<int>((left + 999) / 1000);
    }
    pollfd p[2] = {{fd, POLLIN, 0}, {watch_fd, POLLIN, 0}};
    const int ready = ::poll(p, watch_fd >= 0 ? 2 : 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return FrameStatus::Closed;
    if (ready == 0) continue;  // the deadline is checked at the top
    if (watch_fd >= 0 && p[1].revents != 0 && p[0].revents == 0) return FrameStatus::Closed;
    const ssize_t n = ::read(fd, data, size);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return FrameStatus::Closed;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return FrameStatus::Ok;
}

}  // namespace

bool write_frame(int fd, WorkerOp op, const std::string& payload, std::uint32_t sequence) {
  FrameHeader header;
  header.op = static_cast<std::uint32_t>(op);
  header.sequence = sequence;
  header.size = payload.size();
  return write_all(fd, reinterpret_cast<const char*>(&header), sizeof header) &&
         write_all(fd, payload.data(), payload.size());
}

FrameStatus read_frame(int fd, WorkerFrame* frame, std::optional<std::chrono::steady_clock::time_point> deadline,
                       std::uint64_t max_payload, int watch_fd) {
  FrameHeader header;
  FrameStatus status = read_all(fd, reinterpret_cast<char*>(&header), sizeof header, deadline, watch_fd);
  if (status != FrameStatus::Ok) return status;
  frame->claimed_size = header.size;
  if (header.size > max_payload || header.size > kMaxWorkerPayload) return FrameStatus::TooLarge;
  frame->op = static_cast<WorkerOp>(header.op);
  frame->sequence = header.sequence;
  frame->payload.resize(header.size);
  return read_all(fd, frame->payload.data(), header.size, deadline, watch_fd);
}

bool has_unread_bytes(int fd) {
  char byte;
  return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

}  // namespace pipelane
