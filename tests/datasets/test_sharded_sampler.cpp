#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "datasets/data_error.h"
#include "datasets/sharded_sampler.h"

namespace pipelane {
namespace {

// Documents of varied lengths with token value = position, so a sample names its own origin.
TokenSplit make_split(std::uint64_t docs, std::uint64_t seed = 7) {
  TokenSplit s{{}, {0}};
  for (std::uint64_t d = 0; d < docs; ++d) {
    const std::uint64_t len = 3 + (d * 37 + seed) % 50;
    for (std::uint64_t i = 0; i < len; ++i) s.tokens.push_back(static_cast<std::uint32_t>(s.tokens.size()));
    s.doc_offsets.push_back(s.tokens.size());
  }
  return s;
}

std::vector<std::uint64_t> epoch_origins(const TokenSplit& split, SampleMode mode, int rank, int size) {
  ShardedSampler sampler(split, {16, 42, mode, rank, size});
  const std::uint64_t n = sampler.samples_per_epoch();
  std::vector<std::uint64_t> origins;
  // Rank r gets global samples r, r+size, ...: those below n are this epoch's.
  for (std::uint64_t g = static_cast<std::uint64_t>(rank); g < n; g += static_cast<std::uint64_t>(size))
    origins.push_back(sampler.next_sample_origin().second);
  return origins;
}

TEST(ShardedSampler, RanksPartitionEachEpochWithoutOverlapOrGap) {
  const TokenSplit split = make_split(200);
  for (SampleMode mode : {SampleMode::kCrossDocuments, SampleMode::kWithinDocuments}) {
    std::vector<std::uint64_t> single = epoch_origins(split, mode, 0, 1);
    const std::set<std::uint64_t> reference(single.begin(), single.end());
    ASSERT_EQ(reference.size(), single.size()) << "dp=1 repeats a sample within an epoch";
    ASSERT_EQ(single.size(), count_samples(split, 16, mode));
    for (int dp = 1; dp <= 4; ++dp) {
      std::vector<std::uint64_t> all;
      for (int r = 0; r < dp; ++r) {
        const auto mine = epoch_origins(split, mode, r, dp);
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end());
      EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "duplicate at dp=" << dp;
      EXPECT_EQ(std::set<std::uint64_t>(all.begin(), all.end()), reference) << "dp=" << dp;
    }
  }
}

TEST(ShardedSampler, CrossDocumentSamplesAreContiguousInShuffledDocOrder) {
  const TokenSplit split = make_split(50);
  ShardedSampler sampler(split, {16, 1, SampleMode::kCrossDocuments, 0, 1});
  std::vector<std::int32_t> in(16), out(16);
  std::uint64_t tokens_seen = 0;
  for (std::uint64_t i = 0; i < sampler.samples_per_epoch(); ++i) {
    sampler.next_batch(1, in.data(), out.data());
    for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(in[t + 1], out[t]);
    tokens_seen += 16;
  }
  EXPECT_EQ(tokens_seen, (split.tokens.size() - 1) / 16 * 16);
}

TEST(ShardedSampler, WithinDocumentSamplesNeverCrossABoundary) {
  const TokenSplit split = make_split(80);
  ShardedSampler sampler(split, {8, 3, SampleMode::kWithinDocuments, 0, 1});
  std::vector<std::int32_t> in(8), out(8);
  for (std::uint64_t i = 0; i < sampler.samples_per_epoch(); ++i) {
    sampler.next_batch(1, in.data(), out.data());
    // Tokens are positions: contiguous values mean one document unless an offset lies inside.
    const auto first = static_cast<std::uint64_t>(in[0]), last = static_cast<std::uint64_t>(out[7]);
    ASSERT_EQ(last, first + 8);
    for (std::uint64_t off : split.doc_offsets) EXPECT_FALSE(off > first && off <= last);
  }
}

TEST(ShardedSampler, EpochsReshuffleAndDependOnSeed) {
  const TokenSplit split = make_split(100);
  ShardedSampler a(split, {16, 5, SampleMode::kCrossDocuments, 0, 1});
  const std::uint64_t n = a.samples_per_epoch();
  std::vector<std::uint64_t> e0, e1;
  for (std::uint64_t i = 0; i < n; ++i) e0.push_back(a.next_sample_origin().second);
  for (std::uint64_t i = 0; i < n; ++i) e1.push_back(a.next_sample_origin().second);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(a.state().epoch, 2u);
  ShardedSampler b(split, {16, 6, SampleMode::kCrossDocuments, 0, 1});
  std::vector<std::uint64_t> other;
  for (std::uint64_t i = 0; i < n; ++i) other.push_back(b.next_sample_origin().second);
  EXPECT_NE(e0, other);
}

TEST(ShardedSampler, ResumesFromStateEvenWithAnotherDpSize) {
  const TokenSplit split = make_split(120);
  const TokenSplit other = make_split(60, 3);
  for (bool blend : {false, true}) {
    std::vector<WeightedSplit> splits{{&split, 0.7}};
    if (blend) splits.push_back({&other, 0.3});
    ShardedSampler straight(splits, {16, 9, SampleMode::kCrossDocuments, 0, 1});
    std::vector<std::pair<std::size_t, std::uint64_t>> expected;
    for (int i = 0; i < 500; ++i) expected.push_back(straight.next_sample_origin());

    ShardedSampler first(splits, {16, 9, SampleMode::kCrossDocuments, 0, 1});
    for (int i = 0; i < 210; ++i) first.next_sample_origin();
    const SamplerState saved = first.state();
    EXPECT_EQ(saved.epoch * saved.samples_per_epoch + saved.position, 210u);
    // Resume on two ranks: interleaved they continue the dp=1 stream exactly.
    ShardedSampler r0(splits, {16, 9, SampleMode::kCrossDocuments, 0, 2});
    ShardedSampler r1(splits, {16, 9, SampleMode::kCrossDocuments, 1, 2});
    r0.restore(saved);
    r1.restore(saved);
    for (int i = 210; i < 500; i += 2) {
      EXPECT_EQ(r0.next_sample_origin(), expected[i]) << "blend=" << blend << " i=" << i;
      EXPECT_EQ(r1.next_sample_origin(), expected[i + 1]) << "blend=" << blend << " i=" << i;
    }
    EXPECT_EQ(r0.state(), r1.state());
  }
}

TEST(ShardedSampler, BlendFollowsWeights) {
  const TokenSplit a = make_split(100), b = make_split(100, 11);
  ShardedSampler sampler({{&a, 3.0}, {&b, 1.0}}, {16, 1, SampleMode::kCrossDocuments, 0, 1});
  int from_a = 0;
  for (int i = 0; i < 1000; ++i) from_a += sampler.next_sample_origin().first == 0;
  EXPECT_EQ(from_a, 750);
}

TEST(ShardedSampler, RefusesBadInputs) {
  const TokenSplit split = make_split(10);
  const TokenSplit tiny{{1, 2, 3}, {0, 3}};
  EXPECT_THROW(ShardedSampler(tiny, {16, 1, SampleMode::kCrossDocuments, 0, 1}), DataError);
  EXPECT_THROW(ShardedSampler(split, {16, 1, SampleMode::kCrossDocuments, 2, 2}), DataError);
  EXPECT_THROW(ShardedSampler(split, {0, 1, SampleMode::kCrossDocuments, 0, 1}), DataError);
  ShardedSampler s(split, {16, 1, SampleMode::kCrossDocuments, 0, 1});
  EXPECT_THROW(s.restore({0, 0, s.samples_per_epoch() + 1}), DataError);
  EXPECT_THROW(parse_sample_mode("documents"), DataError);
  EXPECT_THROW(parse_blend("a.h5:0.5,b.h5"), DataError);
  EXPECT_THROW(parse_blend("a.h5:-1"), DataError);
  const auto blend = parse_blend("a.h5:0.7,dir/b.h5:0.3");
  ASSERT_EQ(blend.size(), 2u);
  EXPECT_EQ(blend[1].first, "dir/b.h5");
  EXPECT_DOUBLE_EQ(blend[1].second, 0.3);
}

}  // namespace
}  // namespace pipelane
