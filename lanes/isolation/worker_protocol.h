// What a ProcessLane and its lane worker say to each other: length-prefixed frames over a stream
// socket. The trainer never trusts a frame: sizes are bounded and a malformed reply ends the worker.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace pipelane {

enum class WorkerOp : std::uint32_t {
  // Requests (trainer -> worker)
  Setup = 1,  // JSON: lane, plugin, options, source, output_dir, rank, seed, arena_bytes, ...
  Step,
  Save,
  Load,       // the saved state
  Report,
  Teardown,
  // Replies (worker -> trainer)
  Ok = 100,   // Setup, Load: JSON {"finished": ...}; Step: WorkerStepResult; Save: the state;
              // Report, Teardown: the report as JSON text
  Fail,       // WorkerFailure byte + message
};

enum class WorkerFailure : char {
  Lane = 'L',       // LaneError
  Quota = 'Q',      // ArenaQuotaError
  Memory = 'M',     // std::bad_alloc: past the worker's memory limit
  Exception = 'E',  // any other exception
};

// The Ok payload of Step, as raw bytes (both ends are the same build).
struct WorkerStepResult {
  double units = 0;
  double wall_s = 0;
  double cpu_s = 0;
  std::int64_t involuntary_switches = 0;
  double waiting_s = -1;
  std::uint64_t memory_bytes = 0;  // the lane's peak memory so far (arena and what it allocated)
  std::uint8_t finished = 0;
};

struct WorkerFrame {
  WorkerOp op = WorkerOp::Ok;
  std::string payload;
  std::uint32_t sequence = 0;  // a request's number; its reply carries the same
  std::uint64_t claimed_size = 0;  // what the header said (also when TooLarge)
};

// Malformed: a header no valid peer sends; TooLarge: a size over the reader's limit (nothing of it
// was read or allocated).
enum class FrameStatus { Ok, Closed, Timeout, Malformed, TooLarge };

// Largest payload either side accepts (a lane's saved state included).
constexpr std::uint64_t kMaxWorkerPayload = std::uint64_t{1} << 30;

// Writes the whole frame (never raises SIGPIPE); false when the peer is gone.
bool write_frame(int fd, WorkerOp op, const std::string& payload, std::uint32_t sequence = 0);
// Reads one frame of at most `max_payload` bytes, waiting at most until `deadline` (none:
// forever). When `watch_fd` becomes readable first (the worker's status pipe: it ended), Closed.
FrameStatus read_frame(int fd, WorkerFrame* frame,
                       std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
                       std::uint64_t max_payload = kMaxWorkerPayload, int watch_fd = -1);
// Whether bytes arrived beyond the frames read (a second reply to one request); never blocks.
bool has_unread_bytes(int fd);

}  // namespace pipelane
