// Sites and the WAN lowering (parallel/sites.h, parallel/wan_schedule.h): where the grid lands,
// what is refused, which transfers are marked, the turn rotation - and that the rotation never
// deadlocks: every schedule, run by every pipeline at once with turns handed on only when the
// receiver has taken the message (the most an MPI rendezvous send's completion can promise).
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "parallel/sites.h"
#include "parallel/wan_schedule.h"

namespace pipelane {
namespace {

TEST(SiteMap, SitesHoldConsecutiveRanksInOrder) {
  const SiteMap sites = SiteMap::from_counts({"east", "west"}, {4, 2});
  EXPECT_EQ(sites.ranks(), 6);
  EXPECT_EQ(sites.site_of(0), 0);
  EXPECT_EQ(sites.site_of(3), 0);
  EXPECT_EQ(sites.site_of(4), 1);
  EXPECT_THROW(sites.site_of(6), std::out_of_range);
  EXPECT_THROW(SiteMap({{"a", 0, 2}, {"b", 3, 2}}), std::invalid_argument);  // a gap at rank 2
  EXPECT_THROW(SiteMap({{"a", 0, 2}, {"a", 2, 2}}), std::invalid_argument);  // a name twice
  EXPECT_THROW(SiteMap({{"a", 0, 0}}), std::invalid_argument);
  EXPECT_EQ(SiteMap().site_of(17), 0);  // no sites: one place
}

TEST(SitePlacement, StagesGoAcrossSitesTensorAndDataParallelismStayInside) {
  const SiteMap sites = SiteMap::from_counts({"east", "west"}, {8, 8});
  const SitePlacement p = place_on_sites({2, 2, 4}, sites);  // tp 2 x dp 2 x pp 4
  ASSERT_EQ(p.stage_sites.size(), 4u);
  EXPECT_EQ(p.stage_sites[0], std::vector<int>{0});
  EXPECT_EQ(p.stage_sites[1], std::vector<int>{0});
  EXPECT_EQ(p.stage_sites[2], std::vector<int>{1});
  EXPECT_EQ(p.stage_sites[3], std::vector<int>{1});
  EXPECT_TRUE(p.tp_across.empty());
  EXPECT_TRUE(p.dp_across.empty());
  EXPECT_EQ(p.crossings, 4);  // stage 1 -> 2 of each of the 4 (tp, dp) pipelines
  EXPECT_TRUE(p.multi_site());
  EXPECT_EQ(p.describe(sites), "east: stages 0-1 (ranks 0-7); west: stages 2-3 (ranks 8-15)");
  EXPECT_EQ(placement_refusal(p, false), "");
  EXPECT_TRUE(placement_warnings(p, false).empty());
}

TEST(SitePlacement, TensorParallelGroupAcrossSitesIsRefusedUnlessForced) {
  // 3 + 5 ranks, tp 2: the group of stage 1 (ranks 2, 3) straddles the sites.
  const SiteMap sites = SiteMap::from_counts({"east", "west"}, {3, 5});
  const SitePlacement p = place_on_sites({2, 1, 4}, sites);
  ASSERT_EQ(p.tp_across.size(), 1u);
  EXPECT_EQ(p.tp_across[0], "stage 1, dp 0: east, west");
  const std::string refusal = placement_refusal(p, false);
  EXPECT_NE(refusal.find("tensor-parallel group across sites (stage 1, dp 0: east, west)"), std::string::npos)
      << refusal;
  EXPECT_EQ(refusal.find('\n'), std::string::npos);  // one line
  EXPECT_EQ(placement_refusal(p, true), "");
  const std::vector<std::string> warnings = placement_warnings(p, true);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("forced"), std::string::npos);
}

TEST(SitePlacement, DataParallelGroupAcrossSitesIsAWarning) {
  const SiteMap sites = SiteMap::from_counts({"east", "west"}, {3, 3});
  const SitePlacement p = place_on_sites({1, 2, 3}, sites);  // stage 1 = ranks 2, 3
  EXPECT_TRUE(p.tp_across.empty());
  ASSERT_EQ(p.dp_across.size(), 1u);
  EXPECT_EQ(placement_refusal(p, false), "");
  ASSERT_EQ(placement_warnings(p, false).size(), 1u);
  EXPECT_NE(placement_warnings(p, false)[0].find("gradient all-reduce crosses the WAN"), std::string::npos);
  EXPECT_THROW(place_on_sites({1, 4, 2}, sites), std::invalid_argument);  // 8 ranks, the sites hold 6
}

TEST(WanRoute, RingsAreTheStagesPipelinesSharingTheSitePair) {
  const SitePlacement p = place_on_sites({1, 3, 2}, SiteMap::from_counts({"a", "b"}, {3, 3}));
  // Stage 0 = ranks 0-2 (site a), stage 1 = ranks 3-5 (site b).
  for (int rank = 0; rank < 6; ++rank) {
    const WanRoute r = wan_route(p, rank, {WanSharing::Temporal, 4});
    ASSERT_EQ(r.links.size(), 1u);
    const WanLink& l = r.links[0];
    EXPECT_EQ(l.peer_stage, rank < 3 ? 1 : 0);
    EXPECT_EQ(l.ring, rank < 3 ? std::vector<int>({0, 1, 2}) : std::vector<int>({3, 4, 5}));
    EXPECT_EQ(l.turn, rank % 3);
  }
  // One site: nothing crosses.
  const SitePlacement one = place_on_sites({1, 3, 2}, SiteMap());
  EXPECT_TRUE(wan_route(one, 0, {}).links.empty());
}

TEST(WanLowering, OneSiteLeavesTheListUnchanged) {
  const ScheduleSpec spec{ScheduleKind::Interleaved, 2, 2, 4};
  const SitePlacement p = place_on_sites({1, 2, 2}, SiteMap());
  for (int stage = 0; stage < 2; ++stage) {
    const std::vector<Instr> plain = build_schedule(spec, stage);
    const std::vector<Instr> lowered = lower_for_wan(plain, wan_route(p, stage * 2, {WanSharing::Temporal, 8}));
    ASSERT_EQ(lowered.size(), plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(instr_to_string(lowered[i]), instr_to_string(plain[i]));
  }
}

TEST(WanLowering, CrossSiteTransfersAreStripedAndSendsTakeTurns) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 4, 1, 6};
  const SitePlacement p = place_on_sites({1, 2, 4}, SiteMap::from_counts({"a", "b"}, {4, 4}));
  for (WanSharing sharing : {WanSharing::Temporal, WanSharing::Concurrent})
    for (int rank = 0; rank < 8; ++rank) {
      const int stage = rank / 2;
      const std::vector<Instr> list =
          lower_for_wan(build_schedule(spec, stage), wan_route(p, rank, {sharing, 3}));
      int slot = 0;
      for (const Instr& in : list) {
        const bool crosses = is_transfer(in.op) && ((stage == 1 && in.peer_stage == 2) || (stage == 2 && in.peer_stage == 1));
        EXPECT_EQ(in.wan.crosses(), crosses) << instr_to_string(in) << " on stage " << stage;
        if (!crosses) continue;
        EXPECT_EQ(in.wan.stripes, 3);
        EXPECT_EQ(in.wan.sharers, 2);
        const bool send = in.op == Op::SendFwd || in.op == Op::SendBwd;
        if (send && sharing == WanSharing::Temporal) {
          EXPECT_EQ(in.wan.turn, rank % 2);
          EXPECT_EQ(in.wan.slot, slot++);
        } else {
          EXPECT_FALSE(in.wan.has_turn());
        }
      }
      if (sharing == WanSharing::Temporal && (stage == 1 || stage == 2)) {
        EXPECT_EQ(slot, 6);  // one message per microbatch each way
        EXPECT_EQ(turn_slots(list, stage == 1 ? 2 : 1), 6);
      }
    }
  EXPECT_THROW(lower_for_wan({}, WanRoute{{WanSharing::Temporal, 0}, {}}), std::invalid_argument);
}

TEST(WanTurns, TheRotationGoesRoundTheRingSlotBySlot) {
  WanLink link;
  link.peer_stage = 1;
  link.ring = {10, 11, 12};
  WanSlot s;
  s.sharers = 3;
  s.turn = 0;
  s.slot = 0;
  EXPECT_FALSE(turn_before(link, s));  // the first message of the iteration
  EXPECT_EQ(turn_after(link, s, 4)->rank, 11);
  EXPECT_EQ(turn_after(link, s, 4)->slot, 0);
  s.turn = 2;
  EXPECT_EQ(turn_before(link, s)->rank, 11);
  EXPECT_EQ(turn_after(link, s, 4)->rank, 10);  // the last turn hands slot 1 to the first
  EXPECT_EQ(turn_after(link, s, 4)->slot, 1);
  s.turn = 0;
  s.slot = 3;
  EXPECT_EQ(turn_before(link, s)->rank, 12);
  EXPECT_EQ(turn_before(link, s)->slot, 2);
  s.turn = 2;
  EXPECT_FALSE(turn_after(link, s, 4));  // the iteration's last message
}

// Runs every rank's lowered list together, with blocking receives, buffered sends, a barrier at
// GradSync and turns handed on when the receiver takes the message. Returns "" or what is stuck.
std::string run_with_turns(const ScheduleSpec& spec, ParallelDims dims, const SitePlacement& placement,
                           int iterations) {
  const RankGrid grid(dims);
  const int world = dims.world();
  std::vector<std::vector<Instr>> lists(world);
  std::vector<WanRoute> routes(world);
  for (int r = 0; r < world; ++r) {
    routes[r] = wan_route(placement, r, {WanSharing::Temporal, 2});
    lists[r] = lower_for_wan(build_schedule(spec, grid.coords(r).pp), routes[r]);
  }
  for (int it = 0; it < iterations; ++it) {
    // (from, to, forward?) -> messages in flight: (microbatch, receiving chunk, pass on receipt)
    using Channel = std::tuple<int, int, bool>;
    struct Message {
      int mb, chunk;
      std::optional<TurnHolder> pass;
    };
    std::map<Channel, std::deque<Message>> channels;
    std::set<std::tuple<int, int, int>> tokens;  // (rank, peer stage, slot) whose turn has come
    std::vector<std::size_t> pc(world, 0);
    std::vector<std::deque<Instr>> deferred(world);  // sends waiting for their turn, in list order
    bool done = false;
    while (!done) {
      bool progress = false;
      for (int r = 0; r < world; ++r) {
        const RankCoords me = grid.coords(r);
        // Posts a send whose turn has come; false while it has not.
        const auto post = [&](const Instr& in) {
          const WanLink* link = routes[r].link_to(in.peer_stage);
          std::optional<TurnHolder> pass;
          if (in.wan.has_turn()) {
            const auto before = turn_before(*link, in.wan);
            if (before && !tokens.erase({r, in.peer_stage, in.wan.slot})) return false;
            pass = turn_after(*link, in.wan, turn_slots(lists[r], in.peer_stage));
          }
          RankCoords to = me;
          to.pp = in.peer_stage;
          channels[{r, grid.rank_of(to), in.op == Op::SendFwd}].push_back({in.microbatch, in.peer_chunk, pass});
          return true;
        };
        while (!deferred[r].empty() && post(deferred[r].front())) {
          deferred[r].pop_front();
          progress = true;
        }
        while (pc[r] < lists[r].size()) {
          const Instr& in = lists[r][pc[r]];
          if (in.op == Op::GradSync) break;
          if (in.op == Op::SendFwd || in.op == Op::SendBwd) {
            // Sends never block: one whose turn has not come waits in the queue, behind the others.
            if (!deferred[r].empty() || !post(in)) deferred[r].push_back(in);
          } else if (in.op == Op::RecvFwd || in.op == Op::RecvBwd) {
            RankCoords from = me;
            from.pp = in.peer_stage;
            auto& queue = channels[{grid.rank_of(from), r, in.op == Op::RecvFwd}];
            if (queue.empty()) break;
            const Message m = queue.front();
            if (m.mb != in.microbatch || m.chunk != in.chunk) return "out of order at rank " + std::to_string(r);
            queue.pop_front();
            // The sender's turn goes on once its message is taken. The token belongs to the
            // next sender of the same stage: it sends towards the receiving stage (this one).
            if (m.pass) tokens.insert({m.pass->rank, me.pp, m.pass->slot});
          }
          ++pc[r];
          progress = true;
        }
      }
      bool all_at_sync = true;
      for (int r = 0; r < world; ++r)
        if (lists[r][pc[r]].op != Op::GradSync || !deferred[r].empty()) all_at_sync = false;
      if (all_at_sync) {
        if (!tokens.empty()) return "tokens left at the end of the iteration";
        done = true;
      } else if (!progress) {
        std::string stuck;
        for (int r = 0; r < world; ++r)
          if (lists[r][pc[r]].op != Op::GradSync || !deferred[r].empty())
            stuck += " rank " + std::to_string(r) + " at " + instr_to_string(lists[r][pc[r]]) + " (" +
                     std::to_string(deferred[r].size()) + " sends waiting for their turn);";
        return "deadlock:" + stuck;
      }
    }
  }
  return "";
}

TEST(WanTurns, NoScheduleDeadlocksUnderTemporalSharing) {
  int runs = 0;
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1, ScheduleKind::Interleaved})
    for (int pp = 2; pp <= 4; ++pp)
      for (int dp = 2; dp <= 3; ++dp)
        for (int m : {pp, 2 * pp, 2 * pp + 1}) {
          const int v = kind == ScheduleKind::Interleaved ? 2 : 1;
          if (kind == ScheduleKind::Interleaved && m % pp != 0) continue;
          const ScheduleSpec spec{kind, pp, v, m};
          const ParallelDims dims{1, dp, pp};
          // Every cut of the pipeline into two sites, and every stage a site of its own.
          std::vector<std::vector<int>> splits;
          for (int first = 1; first < pp; ++first) splits.push_back({first * dp, (pp - first) * dp});
          splits.push_back(std::vector<int>(pp, dp));
          for (const std::vector<int>& counts : splits) {
            std::vector<std::string> names;
            for (std::size_t i = 0; i < counts.size(); ++i) names.push_back("s" + std::to_string(i));
            const SitePlacement placement = place_on_sites(dims, SiteMap::from_counts(names, counts));
            EXPECT_EQ(run_with_turns(spec, dims, placement, 2), "")
                << schedule_kind_name(kind) << " pp " << pp << " dp " << dp << " m " << m << " sites "
                << counts.size();
            ++runs;
          }
        }
  EXPECT_GT(runs, 100);
}

}  // namespace
}  // namespace pipelane
