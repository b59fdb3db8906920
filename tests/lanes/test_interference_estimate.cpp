// The cost of lanes that overrun does not show (lanes/interference_estimate.h) on synthetic
// samples whose truth is known, and control-gap selection (lanes/control_gaps.h). No wall clock:
// the samples are drawn from a seeded generator.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "lanes/control_gaps.h"
#include "lanes/interference_estimate.h"

namespace pipelane {
namespace {

// Samples like a pp 2 stage's: gap ids whose following compute differs (a forward, a backward),
// one in `control_every` gaps a control, every other one left to the lanes; after one of those
// training takes `delay_s` longer. Noise: normal, `noise_s` standard deviation.
std::map<int, GapIdSamples> synthetic_samples(std::uint32_t seed, double delay_s, double noise_s, int iterations,
                                              int control_every) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> noise(0.0, noise_s);
  const std::map<int, double> compute_s = {{0, 0.004}, {3, 0.009}, {5, 0.004}, {7, 0.009}, {9, 0.009}};
  std::map<int, GapIdSamples> out;
  for (int it = 0; it < iterations; ++it)
    for (const auto& [gap_id, base] : compute_s) {
      const bool control = is_control_gap(it, gap_id, 0, control_every);
      (control ? out[gap_id].control : out[gap_id].lanes).add(base + (control ? 0.0 : delay_s) + noise(random));
    }
  return out;
}

TEST(InterferenceEstimate, AKnownDelayAfterFilledGapsIsRecoveredWithinItsStandardError) {
  const double delay = 0.0005, noise = 0.0004;
  const InterferenceEstimate e = estimate_interference(synthetic_samples(7, delay, noise, 400, 8), 8);
  ASSERT_TRUE(e.estimated) << why_not_estimated(e);
  EXPECT_EQ(e.lane_gaps + e.control_gaps, 2000);
  EXPECT_EQ(e.compared_lane_gaps, e.lane_gaps);
  EXPECT_GT(e.control_gaps, 2000 / 8 / 2);
  const double truth = delay * static_cast<double>(e.lane_gaps);
  EXPECT_GT(e.stderr_s, 0);
  EXPECT_LE(std::abs(e.extra_s - truth), 3 * e.stderr_s) << e.extra_s << " vs " << truth << " +- " << e.stderr_s;
  // And the delay is told apart from none: many standard errors above zero.
  EXPECT_GT(e.extra_s, 5 * e.stderr_s);
}

TEST(InterferenceEstimate, NoDelayIsConsistentWithZero) {
  const InterferenceEstimate e = estimate_interference(synthetic_samples(11, 0.0, 0.0004, 400, 8), 8);
  ASSERT_TRUE(e.estimated);
  EXPECT_GT(e.stderr_s, 0);
  EXPECT_LE(std::abs(e.extra_s), 3 * e.stderr_s) << e.extra_s << " +- " << e.stderr_s;
}

// The standard error means what it says: over many seeded runs the truth lies within one standard
// error about 68% of the time and within two about 95% (bounds wide enough for 300 runs).
TEST(InterferenceEstimate, TheStandardErrorCoversTheTruthAsOftenAsItShould) {
  const double delay = 0.0003;
  int within_one = 0, within_two = 0;
  const int runs = 300;
  for (int seed = 0; seed < runs; ++seed) {
    const InterferenceEstimate e = estimate_interference(synthetic_samples(1000 + seed, delay, 0.0005, 100, 10), 10);
    ASSERT_TRUE(e.estimated);
    const double error = std::abs(e.extra_s - delay * static_cast<double>(e.lane_gaps));
    within_one += error <= e.stderr_s;
    within_two += error <= 2 * e.stderr_s;
  }
  EXPECT_GT(within_one, runs * 0.58);
  EXPECT_LT(within_one, runs * 0.78);
  EXPECT_GT(within_two, runs * 0.90);
}

TEST(InterferenceEstimate, TooFewControlGapsGiveNoNumberAndSayWhy) {
  std::map<int, GapIdSamples> few;
  for (int k = 0; k < 20; ++k) few[2].lanes.add(0.004 + 1e-5 * k);
  for (int k = 0; k < 5; ++k) few[2].control.add(0.004 - 1e-5 * k);
  const InterferenceEstimate e = estimate_interference(few, 32);
  EXPECT_FALSE(e.estimated);
  EXPECT_EQ(e.control_gaps, 5);
  EXPECT_EQ(e.lane_gaps, 20);
  EXPECT_EQ(why_not_estimated(e), "not enough control gaps (5 compared; each rank needs 8)");
  EXPECT_EQ(why_not_estimated(estimate_interference(few, 0)), "control gaps off ([lanes] control_every = 0)");
  // Control gaps in gap ids no lane gap had are no comparison.
  std::map<int, GapIdSamples> apart;
  for (int k = 0; k < 20; ++k) apart[2].lanes.add(0.004);
  for (int k = 0; k < 20; ++k) apart[3].control.add(0.009);
  const InterferenceEstimate none = estimate_interference(apart, 32);
  EXPECT_FALSE(none.estimated);
  EXPECT_EQ(none.compared_control_gaps, 0);
}

TEST(InterferenceEstimate, FilledGapsOfIdsWithoutControlsAreScaledFromTheComparedOnes) {
  std::map<int, GapIdSamples> s;
  for (int k = 0; k < 10; ++k) {
    s[1].lanes.add(k % 2 ? 0.0051 : 0.0049);   // mean 5 ms: 1 ms after lane gaps
    s[1].control.add(k % 2 ? 0.0041 : 0.0039);  // mean 4 ms
    s[2].lanes.add(0.007);                     // no control gap of id 2
  }
  const InterferenceEstimate e = estimate_interference(s, 16);
  ASSERT_TRUE(e.estimated);
  EXPECT_EQ(e.compared_lane_gaps, 10);
  EXPECT_EQ(e.lane_gaps, 20);
  EXPECT_NEAR(e.extra_s, 20 * 0.001, 1e-12);
}

TEST(InterferenceEstimate, NoFilledGapsCostNothing) {
  std::map<int, GapIdSamples> s;
  for (int k = 0; k < 3; ++k) s[1].control.add(0.004);
  const InterferenceEstimate e = estimate_interference(s, 32);
  EXPECT_TRUE(e.estimated);
  EXPECT_EQ(e.extra_s, 0);
  EXPECT_EQ(e.stderr_s, 0);
}

TEST(InterferenceEstimate, RanksAddUpTimesAndStandardErrorsInQuadrature) {
  InterferenceEstimate a, b;
  a.control_every = b.control_every = 32;
  a.estimated = b.estimated = true;
  a.control_gaps = 10, b.control_gaps = 12;
  a.lane_gaps = 300, b.lane_gaps = 280;
  a.extra_s = 0.3, b.extra_s = 0.1;
  a.stderr_s = 0.03, b.stderr_s = 0.04;
  const InterferenceEstimate both = combine_interference(a, b);
  EXPECT_TRUE(both.estimated);
  EXPECT_EQ(both.control_gaps, 22);
  EXPECT_EQ(both.lane_gaps, 580);
  EXPECT_NEAR(both.extra_s, 0.4, 1e-15);
  EXPECT_NEAR(both.stderr_s, 0.05, 1e-15);
  b.estimated = false;
  EXPECT_FALSE(combine_interference(a, b).estimated) << "one rank without a number: the job has none";
}

// The sampler pairs what the scheduler said of a gap with what training then computed, per
// iteration: a sample is the scheduler's time after the arrival plus the compute after the wait.
TEST(InterferenceSampler, PairsEachGapWithTheComputeAfterItInTheSameIteration) {
  InterferenceSampler sampler;
  for (int it = 1; it <= 10; ++it) {
    sampler.gap_ended(it, 4, InterferenceSampler::GapUse::Lanes, 0.0002);
    sampler.gap_ended(it, 6, InterferenceSampler::GapUse::Control, 0.0001);
    // Gap 8 was neither (profiling, or empty by chance): its compute is no sample.
    sampler.training_after_gaps(it, {{4, 0.005 + 1e-6 * it}, {6, 0.004 + 1e-6 * it}, {8, 0.003}});
  }
  sampler.training_after_gaps(3, {{4, 1.0}});                             // an old iteration: ignored
  sampler.gap_ended(11, 4, InterferenceSampler::GapUse::Lanes, 0.0002);  // not reported yet: no sample
  const InterferenceEstimate e = sampler.estimate(16);
  EXPECT_EQ(e.lane_gaps, 10);
  EXPECT_EQ(e.control_gaps, 10);
  // Gap ids 4 and 6 are different instructions: no comparison between them.
  EXPECT_EQ(e.compared_control_gaps, 0);
  EXPECT_FALSE(e.estimated);

  InterferenceSampler same_gap;
  for (int it = 1; it <= 40; ++it) {
    const bool control = it % 4 == 0;
    same_gap.gap_ended(it, 4, control ? InterferenceSampler::GapUse::Control : InterferenceSampler::GapUse::Lanes,
                       control ? 0.0001 : 0.0003);
    same_gap.training_after_gaps(it, {{4, (control ? 0.004 : 0.0045) + (it % 3) * 1e-6}});
  }
  const InterferenceEstimate joined = same_gap.estimate(4);
  ASSERT_TRUE(joined.estimated);
  EXPECT_EQ(joined.control_gaps, 10);
  // 30 lane gaps, each 0.5 ms more compute and 0.2 ms more of the scheduler's own time.
  EXPECT_NEAR(joined.extra_s, 30 * 0.0007, 30 * 2e-6);
}

TEST(ControlGaps, AboutOneGapInNIsAControl) {
  for (const int every : {4, 32}) {
    long controls = 0, gaps = 0;
    for (int it = 0; it < 2000; ++it)
      for (int gap_id = 0; gap_id < 20; ++gap_id, ++gaps) controls += is_control_gap(it, gap_id, 1, every);
    const double expected = static_cast<double>(gaps) / every;
    EXPECT_NEAR(static_cast<double>(controls), expected, 5 * std::sqrt(expected)) << "every " << every;
  }
  EXPECT_FALSE(is_control_gap(3, 4, 0, 0)) << "0: off";
  EXPECT_FALSE(is_control_gap(3, 4, 0, -1));
  EXPECT_TRUE(is_control_gap(3, 4, 0, 1)) << "1: every gap";
}

TEST(ControlGaps, TheChoiceIsRepeatableSpreadOverGapIdsAndDiffersBetweenStages) {
  std::set<int> ids_with_controls;
  int same_on_both_stages = 0, on_stage0 = 0;
  for (int it = 0; it < 400; ++it)
    for (int gap_id = 0; gap_id < 12; ++gap_id) {
      const bool control = is_control_gap(it, gap_id, 0, 8);
      EXPECT_EQ(control, is_control_gap(it, gap_id, 0, 8));
      if (control) {
        ids_with_controls.insert(gap_id);
        ++on_stage0;
        same_on_both_stages += is_control_gap(it, gap_id, 1, 8);
      }
    }
  EXPECT_EQ(ids_with_controls.size(), 12u) << "every gap id gets control gaps";
  // Independent stages agree on about 1 in 8 of stage 0's controls, not on all of them.
  EXPECT_LT(same_on_both_stages, on_stage0 / 3);
  // Not the schedule's period: consecutive iterations of one gap id are not all alike.
  int runs = 0;
  for (int it = 1; it < 400; ++it) runs += is_control_gap(it, 5, 0, 8) != is_control_gap(it - 1, 5, 0, 8);
  EXPECT_GT(runs, 40);
}

}  // namespace
}  // namespace pipelane
