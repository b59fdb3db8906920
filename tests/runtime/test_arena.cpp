// Arena: aligned bump allocation from one reservation, zero-filled, with a hard quota.
#include "runtime/arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace pipelane {
namespace {

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(Arena, AllocationsAreAlignedAndDisjoint) {
  Arena arena("align", 4096);
  EXPECT_EQ(arena.alignment(), Arena::kDefaultAlignment);
  EXPECT_EQ(Arena::kDefaultAlignment, 64u);
  const void* prev_end = nullptr;
  for (std::size_t bytes : {1, 3, 64, 65, 100, 0, 7}) {
    auto* p = static_cast<unsigned char*>(arena.allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % 64, 0u) << "bytes=" << bytes;
    if (prev_end) {
      EXPECT_GE(addr(p), addr(prev_end)) << "overlaps the previous allocation";
    }
    prev_end = p + (bytes == 0 ? 1 : bytes);
  }
  // A larger power-of-two alignment is honoured too.
  Arena big("align256", 4096, 256);
  EXPECT_EQ(big.alignment(), 256u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(addr(big.allocate(10 + i)) % 256, 0u);
}

TEST(Arena, RejectsAlignmentThatIsNotAPowerOfTwo) {
  EXPECT_THROW(Arena("bad", 1024, 48), std::invalid_argument);
  EXPECT_THROW(Arena("bad", 1024, 0), std::invalid_argument);
}

TEST(Arena, CapacityIsRoundedUpToTheAlignment) {
  Arena arena("cap", 1000);
  EXPECT_EQ(arena.capacity(), 1024u);
  EXPECT_EQ(arena.name(), "cap");
}

TEST(Arena, MemoryIsZeroFilledEvenWhenReused) {
  Arena arena("zero", 1024);
  auto* a = arena.allocate_n<float>(200, "first");
  for (int i = 0; i < 200; ++i) a[i] = 1.0f + i;  // dirty the memory
  arena.reset();
  auto* b = arena.allocate_n<float>(200, "second");
  ASSERT_EQ(static_cast<void*>(a), static_cast<void*>(b));  // the same memory again
  for (int i = 0; i < 200; ++i) ASSERT_EQ(b[i], 0.0f) << "element " << i;
}

TEST(Arena, QuotaErrorNamesTheArenaAndTheRequest) {
  Arena arena("activations", 1024);
  arena.allocate(512, "residual");
  const std::size_t used = arena.used();
  try {
    arena.allocate(600, "kv cache");
    FAIL() << "allocation past the quota did not throw";
  } catch (const ArenaQuotaError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("activations"), std::string::npos) << msg;
    EXPECT_NE(msg.find("kv cache"), std::string::npos) << msg;
    EXPECT_NE(msg.find("600"), std::string::npos) << msg;
  }
  EXPECT_EQ(arena.used(), used);  // a failed request takes nothing
  // Exactly the remaining space still fits; one more byte does not.
  EXPECT_NO_THROW(arena.allocate(512, "rest"));
  EXPECT_EQ(arena.used(), arena.capacity());
  EXPECT_THROW(arena.allocate(1, "one more byte"), ArenaQuotaError);
  EXPECT_THROW(arena.allocate(0, "empty"), ArenaQuotaError);  // zero bytes still take a slot
}

TEST(Arena, QuotaErrorIsARuntimeError) {
  Arena arena("lane", 64);
  EXPECT_THROW(arena.allocate(65), std::runtime_error);
}

TEST(Arena, HugeRequestThrowsInsteadOfWrappingAround) {
  // Rounding SIZE_MAX up to the alignment must not wrap around to a tiny size.
  Arena arena("huge", 1024);
  EXPECT_THROW(arena.allocate(std::numeric_limits<std::size_t>::max(), "huge"), ArenaQuotaError);
  EXPECT_THROW(arena.allocate(std::numeric_limits<std::size_t>::max() - 10, "huge"),
               ArenaQuotaError);
  EXPECT_EQ(arena.used(), 0u);
}

TEST(Arena, HighWaterMarkSurvivesReset) {
  Arena arena("hw", 4096);
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.high_water(), 0u);
  arena.allocate(100);  // 128 bytes once aligned
  arena.allocate(200);  // 256
  EXPECT_EQ(arena.used(), 128u + 256u);
  EXPECT_EQ(arena.high_water(), 384u);
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.high_water(), 384u);  // kept
  arena.allocate(64);
  EXPECT_EQ(arena.high_water(), 384u);  // a smaller peak does not lower it
  arena.allocate(1000);
  EXPECT_EQ(arena.used(), 64u + 1024u);
  EXPECT_EQ(arena.high_water(), 64u + 1024u);  // a larger one raises it
}

TEST(Arena, ResetStartsAgainFromTheBeginning) {
  Arena arena("reset", 256);
  void* first = arena.allocate(10);
  arena.allocate(100);
  arena.reset();
  EXPECT_EQ(arena.allocate(10), first);
  // After reset the whole capacity is available again.
  arena.reset();
  EXPECT_NO_THROW(arena.allocate(256));
}

TEST(Arena, ArenaBytesForMatchesWhatAllocationsUse) {
  for (std::size_t alignment : {std::size_t{64}, std::size_t{16}, std::size_t{256}}) {
    const std::size_t sizes[] = {1, 0, 64, 65, 1000, 4096, 13};
    const std::size_t need =
        arena_bytes_for({sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6]},
                        alignment);
    Arena arena("sized", need, alignment);
    EXPECT_EQ(arena.capacity(), need) << "alignment " << alignment;
    for (std::size_t s : sizes) ASSERT_NO_THROW(arena.allocate(s)) << "alignment " << alignment;
    EXPECT_EQ(arena.used(), need) << "alignment " << alignment;  // exactly, no slack
    EXPECT_THROW(arena.allocate(1), ArenaQuotaError);
  }
  EXPECT_EQ(arena_bytes_for({}), 0u);
  EXPECT_EQ(arena_bytes_for({1}), 64u);
  EXPECT_EQ(arena_bytes_for({64, 65}), 64u + 128u);
  EXPECT_EQ(align_up(0, 64), 0u);
  EXPECT_EQ(align_up(65, 64), 128u);
}

TEST(Arena, ZeroCapacityArenaRejectsEverything) {
  Arena arena("empty", 0);
  EXPECT_EQ(arena.capacity(), 0u);
  EXPECT_THROW(arena.allocate(1), ArenaQuotaError);
}

}  // namespace
}  // namespace pipelane
