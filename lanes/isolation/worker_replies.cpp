#include "lanes/isolation/worker_replies.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pipelane {

std::uint64_t max_reply_bytes(WorkerOp request, std::uint64_t state_bytes) {
  // Any request may be answered with a failure message; a step's Ok is then checked for its exact
  // size (invalid_step_result).
  if (request == WorkerOp::Save && state_bytes > 0) return std::max(state_bytes, kMaxWorkerJsonBytes);
  if (request == WorkerOp::Save) return kMaxWorkerPayload;
  return kMaxWorkerJsonBytes;
}

std::string invalid_step_result(const std::string& payload, std::uint64_t memory_bound_bytes,
                                WorkerStepResult* out) {
  WorkerStepResult r;
  if (payload.size() != sizeof r) return "a step result of " + std::to_string(payload.size()) + " bytes";
  std::memcpy(&r, payload.data(), sizeof r);
  auto bad_time = [](double t) { return !std::isfinite(t) || t < 0 || t > 1e7; };
  if (!std::isfinite(r.units) || r.units < 0) return "units " + std::to_string(r.units);
  if (bad_time(r.wall_s) || bad_time(r.cpu_s)) return "step times that are not finite and non-negative";
  if (!std::isfinite(r.waiting_s) || (r.waiting_s < 0 && r.waiting_s != -1) || r.waiting_s > 1e7)
    return "a waiting time of " + std::to_string(r.waiting_s);
  if (r.involuntary_switches < 0) return "a negative count of context switches";
  if (r.memory_bytes > memory_bound_bytes)
    return "memory of " + std::to_string(r.memory_bytes) + " bytes, more than it can have (" +
           std::to_string(memory_bound_bytes) + ")";
  if (r.finished > 1) return "finished = " + std::to_string(int(r.finished));
  *out = r;
  return "";
}

std::optional<WorkerFailureReply> parse_failure(const std::string& payload) {
  if (payload.empty()) return std::nullopt;
  const auto kind = static_cast<WorkerFailure>(payload[0]);
  if (kind != WorkerFailure::Lane && kind != WorkerFailure::Quota && kind != WorkerFailure::Memory &&
      kind != WorkerFailure::Exception)
    return std::nullopt;
  // Messages reach the console and summary.json: printable text only, the rest escaped.
  std::string message;
  for (unsigned char c : payload.substr(1)) {
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      message += static_cast<char>(c);
    } else {
      static const char hex[] = "0123456789abcdef";
      message += "\\x";
      message += hex[c >> 4];
      message += hex[c & 15];
    }
  }
  return WorkerFailureReply{kind, message};
}

}  // namespace pipelane
