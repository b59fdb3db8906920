// Step replies for the protocol fuzz test (test_worker_protocol_fuzz.cpp), made from a seed by the
// fake worker (fake_lane_worker.cpp) and again by the test, which judges each one by the protocol's
// rules as written in lanes/isolation/worker_protocol.h and worker_replies.h, independently of
// the trainer's code: a valid worker sends exactly one frame {op Ok, the request's sequence, the
// size of a step result}, whose units and times are finite and non-negative (waiting -1 or
// non-negative), switches non-negative, memory within the worker's limit, finished 0 or 1.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "lanes/isolation/worker_protocol.h"

namespace pipelane::fuzz {

struct FuzzReply {
  std::string bytes;   // what the fake worker writes, in one send
  bool close = false;  // then it exits (a truncated frame)
  bool valid = false;  // what a valid worker could have sent
  double units = 0;    // when valid
};

struct Header {
  std::uint32_t op, sequence;
  std::uint64_t size;
};

inline bool result_is_valid(const WorkerStepResult& r, std::uint64_t memory_bound) {
  auto time_ok = [](double t) { return std::isfinite(t) && t >= 0 && t <= 1e7; };
  return std::isfinite(r.units) && r.units >= 0 && time_ok(r.wall_s) && time_ok(r.cpu_s) &&
         (r.waiting_s == -1 || time_ok(r.waiting_s)) && r.involuntary_switches >= 0 &&
         r.memory_bytes <= memory_bound && r.finished <= 1;
}

// Judges `bytes` as the reply to request `sequence` by the rules above.
inline bool judge(const std::string& bytes, std::uint32_t sequence, std::uint64_t memory_bound, double* units) {
  if (bytes.size() != sizeof(Header) + sizeof(WorkerStepResult)) return false;
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.op != static_cast<std::uint32_t>(WorkerOp::Ok) || h.sequence != sequence || h.size != sizeof(WorkerStepResult))
    return false;
  WorkerStepResult r;
  std::memcpy(&r, bytes.data() + sizeof h, sizeof r);
  *units = r.units;
  return result_is_valid(r, memory_bound);
}

inline FuzzReply make_reply(std::uint64_t seed, std::uint32_t sequence, std::uint64_t memory_bound) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  WorkerStepResult r;
  r.units = static_cast<double>(pick(1000));
  r.wall_s = 0.001 * pick(100);
  r.cpu_s = 0.001 * pick(100);
  r.involuntary_switches = pick(10);
  r.waiting_s = pick(2) ? -1.0 : 0.0001 * pick(100);
  r.memory_bytes = static_cast<std::uint64_t>(pick(1 << 20));
  r.finished = 0;
  Header h{static_cast<std::uint32_t>(WorkerOp::Ok), sequence, sizeof r};
  FuzzReply out;
  const int mutation = pick(16);
  const double bad[] = {NAN, INFINITY, -INFINITY, -1.0, -1e-300, 1e308};
  switch (mutation) {
    case 0: case 1: case 2: break;  // valid as made
    case 3: r.units = bad[pick(6)]; break;
    case 4: r.wall_s = bad[pick(6)]; break;
    case 5: r.waiting_s = bad[pick(6)]; break;
    case 6: r.memory_bytes = memory_bound + 1 + (rng() >> pick(64)); break;
    case 7: r.finished = static_cast<std::uint8_t>(pick(256)); break;
    case 8: h.sequence = sequence + 1 + static_cast<std::uint32_t>(pick(5)); break;
    case 9: h.op = static_cast<std::uint32_t>(rng()); break;
    case 10: h.size = rng() >> pick(64); break;  // up to 2^64 - 1: claimed, never sent
    case 11: r.involuntary_switches = -1 - pick(100); break;
    default: break;  // byte-level mutations below
  }
  out.bytes.assign(reinterpret_cast<const char*>(&h), sizeof h);
  out.bytes.append(reinterpret_cast<const char*>(&r), sizeof r);
  if (mutation == 12) {  // random bit flips anywhere
    for (int i = 1 + pick(4); i > 0; --i) out.bytes[pick(static_cast<int>(out.bytes.size()))] ^= char(1 << pick(8));
  } else if (mutation == 13) {  // truncated, then the worker exits
    out.bytes.resize(pick(static_cast<int>(out.bytes.size())));
    out.close = true;
  } else if (mutation == 14) {  // a second reply after the first
    out.bytes += out.bytes;
  } else if (mutation == 15) {  // random bytes
    out.bytes.resize(pick(96));
    for (char& c : out.bytes) c = static_cast<char>(rng());
    out.close = true;  // else a frame it starts would wait for its deadline
  }
  double units = 0;
  out.valid = !out.close && judge(out.bytes, sequence, memory_bound, &units);
  out.units = units;
  // An invalid frame may claim more than it holds: the worker then exits, so that the trainer
  // refuses it at once rather than at its deadline (a valid one is followed by nothing).
  if (!out.valid) out.close = true;
  return out;
}

}  // namespace pipelane::fuzz
