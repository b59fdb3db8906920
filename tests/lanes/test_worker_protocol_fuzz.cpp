// The protocol trusts nothing: a fake worker answers a real ProcessLane's step with random and
// mutated frames (fuzz_frames.h); the trainer accepts exactly those a valid worker could have sent
// (judged by the protocol's rules, not by the trainer's code), with the units sent, refuses every
// other one as the lane's fault, and never allocates what a frame merely claims.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>

#include "lanes/isolation/process_lane.h"
#include "lanes/isolation/worker_replies.h"
#include "tests/lanes/builtin_io_test_env.h"
#include "tests/lanes/fuzz_frames.h"

namespace pipelane {
namespace {

long peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;
}

TEST(WorkerProtocolFuzz, NothingIsAcceptedThatAValidWorkerWouldNotSend) {
  constexpr int kSeeds = 300;
  constexpr std::size_t kArena = 1 << 20;
  LaneWorkerLaunch launch;
  launch.command = {PIPELANE_FAKE_WORKER};
  launch.bwrap = "";  // the protocol is under test here, not the sandbox: faster without it
  launch.cgroups = false;
  const std::uint64_t bound = kArena + std::max<std::uint64_t>(kArena, 64u << 20) + launch.worker_memory_bytes;
  ::setenv("FAKE_WORKER_MEMORY_BOUND", std::to_string(bound).c_str(), 1);
  const long rss_before = peak_rss_mb();
  int valid = 0, accepted = 0, refused = 0;
  testing_io::LaneEnv env("fuzz", {}, kArena);
  for (int seed = 0; seed < kSeeds; ++seed) {
    ::setenv("FAKE_WORKER_SEED", std::to_string(seed).c_str(), 1);
    const fuzz::FuzzReply expected = fuzz::make_reply(seed, 2, bound);  // setup is request 1
    valid += expected.valid;
    ProcessLane lane("fuzz", "units", launch);
    lane.set_limits({5, 5, 0});
    lane.setup(env.ctx);
    bool ok = false;
    double units = -1;
    try {
      units = lane.step(env.ctx);
      ok = true;
    } catch (const std::exception&) {
      // The lane's fault: a crash (a refused reply) or the failure a Fail frame spelled.
      ++refused;
    }
    accepted += ok;
    EXPECT_EQ(ok, expected.valid) << "seed " << seed;
    if (ok) EXPECT_EQ(units, expected.units) << "seed " << seed;
    try {
      lane.teardown(env.ctx);
    } catch (const std::exception&) {
    }
  }
  // Both sides were exercised: the generator's mutation mix makes about 3 in 16 valid.
  EXPECT_GT(valid, kSeeds / 10);
  EXPECT_GT(kSeeds - valid, kSeeds / 2);
  EXPECT_EQ(accepted + refused, kSeeds);
  // Frames claiming up to 2^64 bytes were refused before anything was allocated for them.
  EXPECT_LT(peak_rss_mb() - rss_before, 64);
}

TEST(WorkerReplies, EachRequestHasItsOwnFrameLimit) {
  EXPECT_EQ(max_reply_bytes(WorkerOp::Step, 0), kMaxWorkerJsonBytes);  // a failure message
  EXPECT_EQ(max_reply_bytes(WorkerOp::Save, 8u << 20), 8u << 20);
  EXPECT_EQ(max_reply_bytes(WorkerOp::Save, 1u << 20), kMaxWorkerJsonBytes);
  EXPECT_EQ(max_reply_bytes(WorkerOp::Report, 8u << 20), kMaxWorkerJsonBytes);
  const auto failure = parse_failure(std::string("L") + "bad\x01\xff");
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->message, "bad\\x01\\xff");
  EXPECT_FALSE(parse_failure("Zwhat").has_value());
  EXPECT_FALSE(parse_failure("").has_value());
}

}  // namespace
}  // namespace pipelane
