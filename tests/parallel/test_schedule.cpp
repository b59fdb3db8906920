// Schedules as data (parallel/schedule) and the unit-cost simulator (parallel/schedule_sim).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/schedule.h"
#include "parallel/schedule_sim.h"

namespace pipelane {
namespace {

const ScheduleKind kAllKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                  ScheduleKind::Interleaved, ScheduleKind::ZeroBubbleH1};

// Every valid spec of the grid: p 1..8, m 1..16 (multiples of p for interleaved), v 2..4 for
// interleaved.
std::vector<ScheduleSpec> grid() {
  std::vector<ScheduleSpec> specs;
  for (ScheduleKind kind : kAllKinds)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m) {
        if (kind != ScheduleKind::Interleaved) {
          specs.push_back({kind, p, 1, m});
        } else if (m % p == 0) {
          for (int v = 2; v <= 4; ++v) specs.push_back({kind, p, v, m});
        }
      }
  return specs;
}

std::string name(const ScheduleSpec& s) {
  return std::string(schedule_kind_name(s.kind)) + " p=" + std::to_string(s.pp) +
         " v=" + std::to_string(s.virtual_stages) + " m=" + std::to_string(s.microbatches);
}

std::vector<std::vector<Instr>> all_lists(const ScheduleSpec& spec) {
  std::vector<std::vector<Instr>> lists;
  for (int s = 0; s < spec.pp; ++s) lists.push_back(build_schedule(spec, s));
  return lists;
}

int count_op(const std::vector<Instr>& list, Op op) {
  return static_cast<int>(std::count_if(list.begin(), list.end(), [&](const Instr& i) { return i.op == op; }));
}

// ---------------------------------------------------------------- names and validation

TEST(ScheduleNames, ParseRoundTrips) {
  for (ScheduleKind kind : kAllKinds) EXPECT_EQ(parse_schedule_kind(schedule_kind_name(kind)), kind);
  EXPECT_EQ(parse_schedule_kind("zb-h1"), ScheduleKind::ZeroBubbleH1);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::OneFOneB);
  EXPECT_THROW(parse_schedule_kind("zb-h2"), std::invalid_argument);
  EXPECT_THROW(parse_schedule_kind(""), std::invalid_argument);
  EXPECT_STREQ(op_name(Op::BwdWeight), "BwdWeight");
  EXPECT_STREQ(wait_kind_name(WaitKind::P2PWait), "P2PWait");
  EXPECT_EQ(instr_to_string({Op::RecvFwd, 3, 1, WaitKind::Warmup}), "RecvFwd mb=3 chunk=1 wait=Warmup");
  EXPECT_EQ(instr_to_string({Op::GradSync, -1, 0, WaitKind::SyncWait}), "GradSync wait=SyncWait");
}

TEST(ScheduleValidation, ImpossibleSpecsThrowOneLine) {
  const std::vector<ScheduleSpec> bad = {
      {ScheduleKind::OneFOneB, 0, 1, 4},    {ScheduleKind::OneFOneB, 2, 1, 0},
      {ScheduleKind::GPipe, 2, 2, 4},       {ScheduleKind::ZeroBubbleH1, 2, 0, 4},
      {ScheduleKind::Interleaved, 2, 1, 4}, {ScheduleKind::Interleaved, 4, 2, 6},
      {ScheduleKind::Interleaved, -1, 2, 4}};
  for (const ScheduleSpec& spec : bad) {
    try {
      build_schedule(spec, 0);
      ADD_FAILURE() << "accepted " << name(spec);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_FALSE(what.empty());
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    EXPECT_THROW(theoretical_bubble_fraction(spec), std::invalid_argument);
  }
  EXPECT_THROW(build_schedule({ScheduleKind::OneFOneB, 4, 1, 8}, 4), std::invalid_argument);
  EXPECT_THROW(build_schedule({ScheduleKind::OneFOneB, 4, 1, 8}, -1), std::invalid_argument);
  try {
    build_schedule({ScheduleKind::Interleaved, 4, 2, 6}, 0);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of pp"), std::string::npos) << e.what();
  }
}

TEST(ScheduleTopology, VirtualStagesFollowMegatronInterleaving) {
  const ScheduleSpec spec{ScheduleKind::Interleaved, 4, 3, 8};
  EXPECT_EQ(virtual_stage(spec, 1, 2), 9);
  EXPECT_TRUE(is_first_virtual_stage(spec, 0, 0));
  EXPECT_FALSE(is_first_virtual_stage(spec, 0, 1));
  EXPECT_TRUE(is_last_virtual_stage(spec, 3, 2));
  EXPECT_FALSE(is_last_virtual_stage(spec, 3, 1));
  EXPECT_EQ(next_virtual_stage(spec, 1, 0), (StageChunk{2, 0}));
  EXPECT_EQ(next_virtual_stage(spec, 3, 0), (StageChunk{0, 1}));
  EXPECT_EQ(prev_virtual_stage(spec, 0, 1), (StageChunk{3, 0}));
  EXPECT_EQ(prev_virtual_stage(spec, 2, 2), (StageChunk{1, 2}));
  EXPECT_THROW(next_virtual_stage(spec, 3, 2), std::logic_error);
  EXPECT_THROW(prev_virtual_stage(spec, 0, 0), std::logic_error);
}

// ---------------------------------------------------------------- exact lists

std::string compact(const std::vector<Instr>& list) {
  std::string s;
  for (const Instr& i : list) {
    switch (i.op) {
      case Op::RecvFwd: s += "rf"; break;
      case Op::Fwd: s += "F"; break;
      case Op::SendFwd: s += "sf"; break;
      case Op::RecvBwd: s += "rb"; break;
      case Op::Bwd: s += "B"; break;
      case Op::BwdWeight: s += "W"; break;
      case Op::SendBwd: s += "sb"; break;
      case Op::GradSync: s += "G"; break;
      case Op::OptimizerStep: s += "O"; break;
    }
    if (i.microbatch >= 0) s += std::to_string(i.microbatch);
    if (i.chunk != 0) {
      s += '.';
      s += std::to_string(i.chunk);
    }
    s += " ";
  }
  return s;
}

TEST(ScheduleLists, OneFOneBMatchesMegatron) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 3, 1, 4};
  EXPECT_EQ(compact(build_schedule(spec, 0)),
            "F0 sf0 F1 sf1 F2 sf2 rb0 B0 F3 sf3 rb1 B1 rb2 B2 rb3 B3 G O ");
  EXPECT_EQ(compact(build_schedule(spec, 1)),
            "rf0 F0 sf0 rf1 F1 sf1 rb0 B0 sb0 rf2 F2 sf2 rb1 B1 sb1 rf3 F3 sf3 rb2 B2 sb2 rb3 B3 sb3 G O ");
  EXPECT_EQ(compact(build_schedule(spec, 2)),
            "rf0 F0 B0 sb0 rf1 F1 B1 sb1 rf2 F2 B2 sb2 rf3 F3 B3 sb3 G O ");
}

TEST(ScheduleLists, GPipeIsAllForwardsThenAllBackwards) {
  EXPECT_EQ(compact(build_schedule({ScheduleKind::GPipe, 2, 1, 3}, 1)),
            "rf0 F0 rf1 F1 rf2 F2 B0 sb0 B1 sb1 B2 sb2 G O ");
}

TEST(ScheduleLists, ZeroBubbleH1DefersWeightPassesByStage) {
  const ScheduleSpec spec{ScheduleKind::ZeroBubbleH1, 3, 1, 4};
  EXPECT_EQ(compact(build_schedule(spec, 0)),
            "F0 sf0 F1 sf1 F2 sf2 rb0 B0 W0 F3 sf3 rb1 B1 W1 rb2 B2 W2 rb3 B3 W3 G O ");
  EXPECT_EQ(compact(build_schedule(spec, 2)),
            "rf0 F0 B0 sb0 rf1 F1 B1 sb1 rf2 F2 B2 sb2 W0 rf3 F3 B3 sb3 W1 W2 W3 G O ");
}

TEST(ScheduleLists, InterleavedMatchesMegatronOrder) {
  // p=2, v=2, m=4: stage 1 warms up with (2-1-1)*2 + (2-1)*2 = 2 forwards.
  const ScheduleSpec spec{ScheduleKind::Interleaved, 2, 2, 4};
  std::string fb;
  for (const Instr& i : build_schedule(spec, 1))
    if (i.op == Op::Fwd || i.op == Op::Bwd)
      fb += std::string(i.op == Op::Fwd ? "F" : "B") + std::to_string(i.microbatch) + "." +
            std::to_string(i.chunk) + " ";
  EXPECT_EQ(fb, "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 ");
}

TEST(ScheduleLists, WaitKindsFollowTheDocumentedRule) {
  const std::vector<Instr> list = build_schedule({ScheduleKind::OneFOneB, 4, 1, 8}, 1);
  // Stage 1 of 4: 2 warmup forwards; the receives before B0 are Warmup, those after F7 Cooldown.
  std::vector<std::string> seen;
  for (const Instr& i : list)
    if (i.wait != WaitKind::None) seen.push_back(instr_to_string(i));
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(seen.front(), "RecvFwd mb=0 chunk=0 wait=Warmup");
  EXPECT_EQ(seen[3], "RecvBwd mb=0 chunk=0 wait=Warmup");
  EXPECT_EQ(seen[4], "RecvFwd mb=3 chunk=0 wait=P2PWait");
  EXPECT_EQ(seen[seen.size() - 2], "RecvBwd mb=7 chunk=0 wait=Cooldown");
  EXPECT_EQ(seen.back(), "GradSync wait=SyncWait");
}

// ---------------------------------------------------------------- invariants over the grid

TEST(ScheduleGrid, EveryMicrobatchChunkRunsOnceInOrder) {
  for (const ScheduleSpec& spec : grid()) {
    const bool split = spec.kind == ScheduleKind::ZeroBubbleH1;
    for (int s = 0; s < spec.pp; ++s) {
      SCOPED_TRACE(name(spec) + " stage " + std::to_string(s));
      const std::vector<Instr> list = build_schedule(spec, s);
      std::map<std::tuple<int, int, Op>, int> position;  // (mb, chunk, op) -> index
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Instr& in = list[i];
        if (in.op == Op::GradSync || in.op == Op::OptimizerStep) {
          EXPECT_EQ(in.microbatch, -1);
          continue;
        }
        ASSERT_GE(in.microbatch, 0);
        ASSERT_LT(in.microbatch, spec.microbatches);
        ASSERT_GE(in.chunk, 0);
        ASSERT_LT(in.chunk, spec.virtual_stages);
        const bool fresh = position.emplace(std::make_tuple(in.microbatch, in.chunk, in.op), i).second;
        ASSERT_TRUE(fresh) << "repeated " << instr_to_string(in);
      }
      for (int mb = 0; mb < spec.microbatches; ++mb)
        for (int c = 0; c < spec.virtual_stages; ++c) {
          const auto f = position.find({mb, c, Op::Fwd});
          const auto b = position.find({mb, c, Op::Bwd});
          ASSERT_NE(f, position.end()) << "no Fwd mb=" << mb << " chunk=" << c;
          ASSERT_NE(b, position.end()) << "no Bwd mb=" << mb << " chunk=" << c;
          EXPECT_LT(f->second, b->second);
          const auto w = position.find({mb, c, Op::BwdWeight});
          if (split) {
            ASSERT_NE(w, position.end()) << "no BwdWeight mb=" << mb;
            EXPECT_LT(b->second, w->second);
          } else {
            EXPECT_EQ(w, position.end());
          }
        }
      const int per_kind = spec.microbatches * spec.virtual_stages;
      EXPECT_EQ(count_op(list, Op::Fwd), per_kind);
      EXPECT_EQ(count_op(list, Op::Bwd), per_kind);
      EXPECT_EQ(count_op(list, Op::BwdWeight), split ? per_kind : 0);
      // Ends with GradSync then OptimizerStep, each exactly once.
      ASSERT_GE(list.size(), 2u);
      EXPECT_EQ(list[list.size() - 2].op, Op::GradSync);
      EXPECT_EQ(list[list.size() - 2].wait, WaitKind::SyncWait);
      EXPECT_EQ(list.back().op, Op::OptimizerStep);
      EXPECT_EQ(count_op(list, Op::GradSync), 1);
      EXPECT_EQ(count_op(list, Op::OptimizerStep), 1);
    }
  }
}

TEST(ScheduleGrid, ReceivesAndSendsWrapTheirComputeAtTheRightVirtualStages) {
  for (const ScheduleSpec& spec : grid()) {
    for (int s = 0; s < spec.pp; ++s) {
      SCOPED_TRACE(name(spec) + " stage " + std::to_string(s));
      const std::vector<Instr> list = build_schedule(spec, s);
      const auto same = [](const Instr& a, const Instr& b, Op op) {
        return a.op == op && a.microbatch == b.microbatch && a.chunk == b.chunk;
      };
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Instr& in = list[i];
        const bool first = in.microbatch >= 0 && is_first_virtual_stage(spec, s, in.chunk);
        const bool last = in.microbatch >= 0 && is_last_virtual_stage(spec, s, in.chunk);
        switch (in.op) {
          case Op::Fwd:
            if (!first) {
              EXPECT_TRUE(i > 0 && same(list[i - 1], in, Op::RecvFwd)) << instr_to_string(in);
            }
            if (!last) {
              EXPECT_TRUE(i + 1 < list.size() && same(list[i + 1], in, Op::SendFwd)) << instr_to_string(in);
            }
            break;
          case Op::Bwd:
            if (!last) {
              EXPECT_TRUE(i > 0 && same(list[i - 1], in, Op::RecvBwd)) << instr_to_string(in);
            }
            if (!first) {
              EXPECT_TRUE(i + 1 < list.size() && same(list[i + 1], in, Op::SendBwd)) << instr_to_string(in);
            }
            break;
          case Op::RecvFwd: EXPECT_FALSE(first) << instr_to_string(in); break;
          case Op::SendBwd: EXPECT_FALSE(first) << instr_to_string(in); break;
          case Op::SendFwd: EXPECT_FALSE(last) << instr_to_string(in); break;
          case Op::RecvBwd: EXPECT_FALSE(last) << instr_to_string(in); break;
          default: break;
        }
      }
    }
  }
}

TEST(ScheduleGrid, EverySendHasTheMatchingReceiveOnTheNeighbour) {
  for (const ScheduleSpec& spec : grid()) {
    SCOPED_TRACE(name(spec));
    const auto lists = all_lists(spec);
    // (direction, to stage, mb, to chunk)
    std::multiset<std::tuple<int, int, int, int>> sent, received;
    for (int s = 0; s < spec.pp; ++s)
      for (const Instr& in : lists[s]) {
        if (in.op == Op::SendFwd) {
          const StageChunk to = next_virtual_stage(spec, s, in.chunk);
          sent.insert({0, to.stage, in.microbatch, to.chunk});
        } else if (in.op == Op::SendBwd) {
          const StageChunk to = prev_virtual_stage(spec, s, in.chunk);
          sent.insert({1, to.stage, in.microbatch, to.chunk});
        } else if (in.op == Op::RecvFwd) {
          received.insert({0, s, in.microbatch, in.chunk});
        } else if (in.op == Op::RecvBwd) {
          received.insert({1, s, in.microbatch, in.chunk});
        }
      }
    EXPECT_EQ(sent, received);
    const std::size_t expected = static_cast<std::size_t>(spec.microbatches) *
                                 (spec.pp * spec.virtual_stages - 1);
    EXPECT_EQ(sent.size(), 2 * expected);
  }
}

TEST(ScheduleGrid, WaitKindsAreOnWaitsOnlyAndFollowTheRule) {
  for (const ScheduleSpec& spec : grid()) {
    for (int s = 0; s < spec.pp; ++s) {
      SCOPED_TRACE(name(spec) + " stage " + std::to_string(s));
      const std::vector<Instr> list = build_schedule(spec, s);
      std::size_t first_bwd = list.size(), last_fwd = 0;
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (list[i].op == Op::Bwd) first_bwd = std::min(first_bwd, i);
        if (list[i].op == Op::Fwd) last_fwd = i;
      }
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Instr& in = list[i];
        if (in.op == Op::GradSync) {
          EXPECT_EQ(in.wait, WaitKind::SyncWait);
        } else if (in.op == Op::RecvFwd || in.op == Op::RecvBwd) {
          const WaitKind want = i < first_bwd  ? WaitKind::Warmup
                                : i > last_fwd ? WaitKind::Cooldown
                                               : WaitKind::P2PWait;
          EXPECT_EQ(in.wait, want) << instr_to_string(in);
          EXPECT_TRUE(is_wait(in.op));
        } else {
          EXPECT_EQ(in.wait, WaitKind::None) << instr_to_string(in);
        }
      }
    }
  }
}

TEST(ScheduleGrid, WarmupCountsAreMegatrons) {
  for (const ScheduleSpec& spec : grid()) {
    const int p = spec.pp, m = spec.microbatches, v = spec.virtual_stages;
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE(name(spec) + " stage " + std::to_string(r));
      int formula = 0;
      switch (spec.kind) {
        case ScheduleKind::GPipe: formula = m; break;
        case ScheduleKind::OneFOneB:
        case ScheduleKind::ZeroBubbleH1: formula = std::min(p - r - 1, m); break;
        case ScheduleKind::Interleaved: formula = std::min((p - r - 1) * 2 + (v - 1) * p, m * v); break;
      }
      EXPECT_EQ(warmup_forwards(spec, r), formula);
      // In the list: the warmup forwards, then (steady state) one more forward before the first
      // backward, unless the warmup already ran them all.
      int forwards_before_first_bwd = 0;
      for (const Instr& in : build_schedule(spec, r)) {
        if (in.op == Op::Bwd) break;
        if (in.op == Op::Fwd) ++forwards_before_first_bwd;
      }
      EXPECT_EQ(forwards_before_first_bwd, std::min(formula + 1, m * v));
    }
  }
}

TEST(ScheduleGrid, SimulatorCompletesAndActivationsStayWithinTheBound) {
  for (const ScheduleSpec& spec : grid()) {
    SCOPED_TRACE(name(spec));
    SimResult result;
    ASSERT_NO_THROW(result = simulate_schedule(spec, SimCosts{}));
    ASSERT_EQ(result.stages.size(), static_cast<std::size_t>(spec.pp));
    for (int s = 0; s < spec.pp; ++s) {
      const int bound = activation_bound(spec, s);
      EXPECT_LE(result.max_in_flight[s], bound) << "stage " << s;
      EXPECT_LE(result.max_in_flight[s], spec.kind == ScheduleKind::GPipe
                                             ? spec.microbatches
                                             : std::max(spec.pp, activation_bound(spec, 0)));
      // The bound is tight: the schedule reaches it.
      EXPECT_EQ(result.max_in_flight[s], bound) << "stage " << s;
      if (spec.kind == ScheduleKind::OneFOneB) {
        EXPECT_EQ(bound, std::min(spec.pp - s, spec.microbatches));
      }
      // Accounting: idle + busy fills the makespan; idle splits into kinds.
      const StageTimeline& tl = result.stages[s];
      EXPECT_NEAR(tl.idle_total + tl.busy, result.makespan, 1e-9);
      double by_kind = 0;
      for (double x : tl.idle_by_kind) by_kind += x;
      EXPECT_NEAR(by_kind, tl.idle_total, 1e-9);
      EXPECT_EQ(tl.idle_by_kind[static_cast<int>(WaitKind::None)], 0.0);
      EXPECT_EQ(tl.events.size(), build_schedule(spec, s).size());
    }
  }
}

// With t_f = 1 and a full backward t_b = 2 (and also t_f = t_b = 1), every stage of GPipe and
// 1F1B idles exactly (p-1)(t_f+t_b) and interleaved (p-1)(t_f+t_b) per chunk pass, so the
// simulated bubble equals the formula exactly. ZB-H1 (t_f = 1, B = 1, W = 1, i.e. t_b = 2,
// t_w = 1) reaches (p-1)(t_f + B - W) exactly once m >= p; with fewer microbatches there are not
// enough W passes to fill the drain, and it is still below 1F1B.
TEST(ScheduleGrid, SimulatedBubbleEqualsTheFormula) {
  for (const SimCosts costs : {SimCosts{1, 2, 1}, SimCosts{1, 1, 0.5}}) {
    for (const ScheduleSpec& spec : grid()) {
      SCOPED_TRACE(name(spec) + " t_b=" + std::to_string(costs.t_b));
      const SimResult result = simulate_schedule(spec, costs);
      const double theory = theoretical_bubble_fraction(spec, costs.t_f, costs.t_b, costs.t_w);
      if (spec.kind != ScheduleKind::ZeroBubbleH1 || spec.microbatches >= spec.pp) {
        EXPECT_NEAR(result.bubble_fraction, theory, 1e-12);
      } else {
        EXPECT_GT(result.bubble_fraction, theory);
      }
      if (spec.kind == ScheduleKind::ZeroBubbleH1) {
        const SimResult one_f_one_b =
            simulate_schedule({ScheduleKind::OneFOneB, spec.pp, 1, spec.microbatches}, costs);
        if (spec.pp > 1) {
          EXPECT_LT(result.bubble_fraction, one_f_one_b.bubble_fraction);
        } else {
          EXPECT_EQ(result.bubble_fraction, 0.0);
        }
      }
    }
  }
}

TEST(ScheduleSimulator, ZeroBubbleH1IsAThirdOf1F1BAtEqualCosts) {
  // t_f = B = W = 1 (t_b = 2): ZB-H1 idles (p-1), 1F1B (p-1)*3 per stage.
  const SimCosts costs{1, 2, 1};
  const SimResult zb = simulate_schedule({ScheduleKind::ZeroBubbleH1, 4, 1, 8}, costs);
  const SimResult ob = simulate_schedule({ScheduleKind::OneFOneB, 4, 1, 8}, costs);
  EXPECT_DOUBLE_EQ(zb.makespan, 8 * 3 + 3);
  EXPECT_DOUBLE_EQ(ob.makespan, (8 + 3) * 3);
  for (int s = 0; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(zb.stages[s].idle_total, 3.0);
    EXPECT_DOUBLE_EQ(ob.stages[s].idle_total, 9.0);
  }
}

TEST(ScheduleSimulator, IdleIsAttributedToWaitKinds) {
  // 1F1B, p=4, m=8, t_f=1, t_b=2. Stage 0 never waits for activations; it waits (p-1)*t_b for
  // the first gradient (Warmup) and p-1 = 3 more units in the steady state and the drain.
  const SimResult r = simulate_schedule({ScheduleKind::OneFOneB, 4, 1, 8}, SimCosts{1, 2, 1});
  const auto kind = [&](int s, WaitKind k) { return r.stages[s].idle_by_kind[static_cast<int>(k)]; };
  EXPECT_DOUBLE_EQ(kind(0, WaitKind::Warmup), 6.0);
  EXPECT_DOUBLE_EQ(kind(0, WaitKind::SyncWait), 0.0);
  // The last stage waits 3 units for its first activation and idles 6 at the end (its grads are
  // done; it waits at GradSync for the drain).
  EXPECT_DOUBLE_EQ(kind(3, WaitKind::Warmup), 3.0);
  EXPECT_DOUBLE_EQ(kind(3, WaitKind::SyncWait), 6.0);
  // Every idle interval names the instruction it waits on, and that instruction is a wait.
  const auto lists = all_lists({ScheduleKind::OneFOneB, 4, 1, 8});
  for (int s = 0; s < 4; ++s)
    for (const SimIdle& idle : r.stages[s].idle) {
      EXPECT_TRUE(is_wait(lists[s][idle.index].op));
      EXPECT_EQ(lists[s][idle.index].wait, idle.kind);
      EXPECT_LT(idle.start, idle.end);
    }
}

TEST(ScheduleSimulator, DeadlockNamesTheStuckStages) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 1, 1};
  // Stage 0 waits for the gradient before sending its activation.
  std::vector<std::vector<Instr>> lists = {
      {{Op::Fwd, 0}, {Op::RecvBwd, 0}, {Op::SendFwd, 0}, {Op::Bwd, 0}, {Op::GradSync}, {Op::OptimizerStep}},
      {{Op::RecvFwd, 0}, {Op::Fwd, 0}, {Op::Bwd, 0}, {Op::SendBwd, 0}, {Op::GradSync}, {Op::OptimizerStep}}};
  try {
    simulate_schedule(spec, lists, SimCosts{});
    FAIL() << "no deadlock reported";
  } catch (const ScheduleDeadlock& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage 0 stuck at #1 RecvBwd mb=0"), std::string::npos) << what;
    EXPECT_NE(what.find("stage 1 stuck at #0 RecvFwd mb=0"), std::string::npos) << what;
  }
}

TEST(ScheduleSimulator, UnmatchedSendIsReported) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 1, 1};
  std::vector<std::vector<Instr>> lists = {
      {{Op::Fwd, 0}, {Op::SendFwd, 0}, {Op::Bwd, 0}, {Op::GradSync}, {Op::OptimizerStep}},
      {{Op::GradSync}, {Op::OptimizerStep}}};
  EXPECT_THROW(simulate_schedule(spec, lists, SimCosts{}), std::invalid_argument);
}

TEST(ScheduleSimulator, RejectsBadCosts) {
  EXPECT_THROW(simulate_schedule({ScheduleKind::ZeroBubbleH1, 2, 1, 2}, SimCosts{1, 1, 2}),
               std::invalid_argument);
  EXPECT_THROW(simulate_schedule({ScheduleKind::OneFOneB, 2, 1, 2}, SimCosts{-1, 1, 0}),
               std::invalid_argument);
}

TEST(ScheduleTheory, ReferenceExamples) {
  // The FreeRide setting: p = 4, m = 4 -> 3/7.
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction({ScheduleKind::OneFOneB, 4, 1, 4}), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction({ScheduleKind::GPipe, 4, 1, 4}), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction({ScheduleKind::Interleaved, 4, 2, 4}), 3.0 / 11.0);
  // ZB-H1 idle is a third of 1F1B's when t_f = B = W (t_b = 2, t_w = 1).
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction({ScheduleKind::ZeroBubbleH1, 4, 1, 8}, 1, 2, 1),
                   3.0 / (3.0 + 24.0));
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction({ScheduleKind::OneFOneB, 1, 1, 4}), 0.0);
}

}  // namespace
}  // namespace pipelane
