// Per-rank results on rank 0 (trainer/run/rank_results.h): lane summaries and trace events
// encoded field by field come back as they were sent, in world-rank order, over three ranks'
// control planes; a message cut short is an error naming the rank's result, not garbage.
#include <gtest/gtest.h>

#include <optional>
#include <thread>
#include <vector>

#include "parallel/thread_planes.h"
#include "trainer/run/rank_results.h"

namespace pipelane {
namespace {

StageLaneSummary lane_summary(int rank) {
  StageLaneSummary s;
  s.stage = rank;
  s.rank = rank;
  s.gaps = 54;
  s.bubble_s = 0.570377625;
  s.harvested_s = 0.1 * rank + 1e-17;
  s.overrun_s = 0.0605;
  s.bubble_after_profiling_s = 0.455;
  s.harvested_after_profiling_s = 0.217;
  s.margin = 0.9;
  s.deterministic = true;
  s.profile_iterations = 2;
  LaneStats& l = s.lanes["pagerank"];
  l.work_unit = "edges";
  l.units = 212992.0;
  l.steps = 13;
  l.lane_s = 8.453560000000332e-4;
  l.calibration_units = 49152;
  l.calibration_steps = 3;
  l.quarantined = true;
  l.quarantine_reason = "2 steps in a row took more than 10x the prediction";
  l.memory_high_water_bytes = 102464;
  l.isolation = "process";
  l.runs_on = "cpu";
  l.backlog_skipped_steps = 4;
  l.report = {{"iterations", 13}, {"residual", 1.928833458079461e-09}, {"top", {{{"vertex", 0}}}}};
  s.lanes["imageproc"].work_unit = "images";  // never set up: its report stays null
  s.plan = {{1, {"pagerank", "imageproc"}}, {4 + rank, {}}};
  // One rank with an estimate, the others without (too few control gaps): both come back.
  InterferenceEstimate& e = s.interference.emplace();
  e.control_every = 32;
  e.control_gaps = 9 + rank;
  e.lane_gaps = 250;
  e.compared_lane_gaps = 240;
  e.compared_control_gaps = 8 + rank;
  e.estimated = rank == 1;
  e.extra_s = 0.0123456789;
  e.stderr_s = 0.003;
  return s;
}

std::vector<TraceEvent> trace(int rank) {
  return {track_name_event(rank, "rank " + std::to_string(rank)),
          {"Fwd", "instr", rank, 1.5e6 * rank, 0.25, {integer_arg("microbatch", -1), integer_arg("chunk", 0)}},
          {"pagerank", "lane", 10000 + 100 * rank, 3.0, 0.1,
           {text_arg("kind", "Cooldown"), number_arg("units", 2.0), integer_arg("gap", 7)}}};
}

nlohmann::json as_json(const std::vector<TraceEvent>& events) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceEvent& e : events) out.push_back(to_json(e));
  return out;
}

TEST(RankResults, EncodingsComeBackAsTheyWere) {
  const StageLaneSummary s = lane_summary(1);
  const std::optional<StageLaneSummary> back = decode_lane_summary(encode_lane_summary(s));
  ASSERT_TRUE(back);
  EXPECT_EQ(to_json(*back).dump(), to_json(s).dump());
  EXPECT_EQ(back->lanes.at("pagerank").quarantine_reason, s.lanes.at("pagerank").quarantine_reason);
  ASSERT_TRUE(back->interference);
  EXPECT_TRUE(back->interference->estimated);
  EXPECT_EQ(back->interference->extra_s, 0.0123456789);
  EXPECT_EQ(back->interference->compared_control_gaps, 9);
  EXPECT_FALSE(decode_lane_summary(encode_lane_summary(std::nullopt)));
  EXPECT_EQ(as_json(decode_trace_events(encode_trace_events(trace(2)))).dump(), as_json(trace(2)).dump());
  EXPECT_TRUE(decode_trace_events(encode_trace_events({})).empty());
}

// A transfer's record carries its message's bytes into the trace (bf16 storage: half of fp32's);
// other instructions get no bytes argument.
TEST(RankResults, TraceEventsOfTransfersCarryTheirBytes) {
  StepStats step;
  step.records.push_back({Instr{Op::Fwd}, 0.0, 0.001, 0});
  InstrRecord send{Instr{Op::SendFwd}, 0.001, 0.002, 0};
  send.bytes = 8192;
  step.records.push_back(send);
  const std::vector<TraceEvent> events = trace_events({step}, {1}, 0, "rank 0");
  const nlohmann::json j = as_json(events);
  ASSERT_EQ(j.size(), 4u);  // the track's name, the step, the two instructions
  EXPECT_EQ(j[2]["name"], "Fwd");
  EXPECT_FALSE(j[2]["args"].contains("bytes"));
  EXPECT_EQ(j[3]["name"], "SendFwd");
  EXPECT_EQ(j[3]["args"]["bytes"], 8192);
}

TEST(RankResults, AMessageCutShortIsAnError) {
  const std::string bytes = encode_lane_summary(lane_summary(0));
  EXPECT_THROW(decode_lane_summary(bytes.substr(0, bytes.size() - 3)), std::runtime_error);
  EXPECT_THROW(decode_lane_summary(bytes + "x"), std::runtime_error);
  const std::string events = encode_trace_events(trace(0));
  EXPECT_THROW(decode_trace_events(events.substr(0, events.size() / 2)), std::runtime_error);
}

TEST(RankResults, RankZeroGetsEveryRanksResultsInRankOrder) {
  ThreadJob job(ParallelDims{1, 1, 3});
  std::vector<std::vector<std::optional<StageLaneSummary>>> lanes(3);
  std::vector<std::vector<TraceEvent>> events(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r, topo = job.topology(r)]() mutable {
      const std::optional<StageLaneSummary> mine = r == 1 ? std::nullopt : std::optional(lane_summary(r));
      lanes[r] = gather_lane_summaries(*topo.world, mine);
      events[r] = gather_trace_events(*topo.world, trace(r));
    });
  for (std::thread& t : ranks) t.join();
  ASSERT_EQ(lanes[0].size(), 3u);
  EXPECT_EQ(to_json(*lanes[0][2]).dump(), to_json(lane_summary(2)).dump());
  EXPECT_FALSE(lanes[0][1]) << "lanes off on rank 1";
  EXPECT_TRUE(lanes[1].empty());
  std::vector<TraceEvent> expected;
  for (int r = 0; r < 3; ++r)
    for (const TraceEvent& e : trace(r)) expected.push_back(e);
  EXPECT_EQ(as_json(events[0]).dump(), as_json(expected).dump());
  EXPECT_TRUE(events[2].empty());
}

}  // namespace
}  // namespace pipelane
