// A fake `pipelane lane-worker` for the protocol fuzz test: it answers setup as a valid worker
// does, then answers the first step with the reply fuzz::make_reply(seed) makes (FAKE_WORKER_SEED,
// FAKE_WORKER_MEMORY_BOUND in its environment), and every later request validly.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "lanes/isolation/worker_protocol.h"
#include "tests/lanes/fuzz_frames.h"

int main() {
  using namespace pipelane;
  const std::uint64_t seed = std::strtoull(std::getenv("FAKE_WORKER_SEED"), nullptr, 10);
  const std::uint64_t bound = std::strtoull(std::getenv("FAKE_WORKER_MEMORY_BOUND"), nullptr, 10);
  const int fd = 3;
  for (bool stepped = false;;) {
    WorkerFrame request;
    if (read_frame(fd, &request) != FrameStatus::Ok) return 0;
    if (request.op == WorkerOp::Step && !stepped) {
      stepped = true;
      const fuzz::FuzzReply reply = fuzz::make_reply(seed, request.sequence, bound);
      (void)!::write(fd, reply.bytes.data(), reply.bytes.size());
      if (reply.close) return 0;
      continue;
    }
    std::string payload = "{}";
    if (request.op == WorkerOp::Setup) payload = R"({"finished": false, "address_space_bytes": 0, "seccomp": "enforced"})";
    if (request.op == WorkerOp::Load) payload = R"({"finished": false})";
    if (request.op == WorkerOp::Step) {
      WorkerStepResult r;
      payload.assign(reinterpret_cast<const char*>(&r), sizeof r);
    }
    if (!write_frame(fd, WorkerOp::Ok, payload, request.sequence)) return 0;
  }
}
