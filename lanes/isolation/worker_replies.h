// The trainer's reading of a lane worker's replies. Nothing in a reply is trusted: a reply is
// accepted only when it is something a valid worker could send for the request it answers;
// anything else is the lane's fault (the worker is killed and the lane quarantined).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "lanes/isolation/worker_protocol.h"

namespace pipelane {

// The largest frame the trainer reads for each request (a frame claiming more is refused before
// anything is allocated for it): a lane's state up to its state_mb; JSON (setup, load, report,
// teardown) and failure messages, the answer any request may get, up to kMaxWorkerJsonBytes (a
// step's result must then be exactly its size).
constexpr std::uint64_t kMaxWorkerJsonBytes = std::uint64_t{4} << 20;
std::uint64_t max_reply_bytes(WorkerOp request, std::uint64_t state_bytes);

// A step result that a valid worker could send: units, times finite and non-negative (waiting_s
// also -1: not measured), switches non-negative, memory at most `memory_bound_bytes`, finished 0
// or 1. "" when valid, what is wrong otherwise.
std::string invalid_step_result(const std::string& payload, std::uint64_t memory_bound_bytes,
                                WorkerStepResult* result);

// What a Fail reply says: its kind and message, or nullopt when it is not a valid Fail payload
// (an unknown kind, or none). Bytes other than printable ASCII, tab and newline are escaped
// as \xNN: the message reaches the console and summary.json.
struct WorkerFailureReply {
  WorkerFailure kind;
  std::string message;
};
std::optional<WorkerFailureReply> parse_failure(const std::string& payload);

}  // namespace pipelane
