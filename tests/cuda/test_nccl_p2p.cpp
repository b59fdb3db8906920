// The NCCL mapping of pipeline transfers (runtime/cuda/plans/nccl_p2p.h), run through simulators
// of NCCL's point-to-point semantics for every schedule the executor runs: sends and receives pair
// by order per communicator, must pair the messages MPI's tags paired, and a call occupies its
// stream until its partner runs. The simulators are conservative (compute waits for every earlier
// receive), so no deadlock here means none on the GPU either.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "parallel/schedule.h"
#include "runtime/cuda/plans/nccl_p2p.h"

namespace pipelane::cuda_test {
namespace {

using cuda::P2PChannel;
using cuda::P2PLink;
using cuda::P2POp;

// What MPI's tag identifies: direction, the receiving chunk, the microbatch.
struct Message {
  bool backward;
  int chunk, microbatch;
  bool operator==(const Message&) const = default;
};

// One step of a rank's program: a transfer, or compute (anything else).
struct Step {
  bool compute;
  P2POp op;
  Message message;
};

// The executor's transfers for one stage, as parallel/pipeline_executor.cpp issues them.
std::vector<Step> program_of(const ScheduleSpec& spec, int stage, bool separate_channels) {
  std::vector<Step> steps;
  const int next = (stage + 1) % spec.pp, prev = (stage - 1 + spec.pp) % spec.pp;
  const P2PChannel grads = separate_channels ? P2PChannel::Gradients : P2PChannel::Activations;
  const std::size_t bytes = 4096;
  for (const Instr& in : build_schedule(spec, stage)) {
    switch (in.op) {
      case Op::RecvFwd:
        steps.push_back({false,
                         {P2POp::Kind::Recv, prev, bytes, P2PChannel::Activations},
                         {false, in.chunk, in.microbatch}});
        break;
      case Op::SendFwd:
        steps.push_back({false,
                         {P2POp::Kind::Send, next, bytes, P2PChannel::Activations},
                         {false, next_virtual_stage(spec, stage, in.chunk).chunk, in.microbatch}});
        break;
      case Op::RecvBwd:
        steps.push_back(
            {false, {P2POp::Kind::Recv, next, bytes, grads}, {true, in.chunk, in.microbatch}});
        break;
      case Op::SendBwd:
        steps.push_back({false,
                         {P2POp::Kind::Send, prev, bytes, grads},
                         {true, prev_virtual_stage(spec, stage, in.chunk).chunk, in.microbatch}});
        break;
      default: steps.push_back({true, {}, {}});
    }
  }
  return steps;
}

// The plan: every transfer alone on its link's stream. Ranks run their programs; a send or
// receive is queued on its link (FIFO on each side), compute waits for the rank's earlier
// receives, and a link pairs the heads of its two queues. Returns "" or what went wrong.
std::string simulate_links(const std::vector<std::vector<Step>>& programs) {
  const int ranks = static_cast<int>(programs.size());
  struct Queued {
    int rank;
    Message message;
    std::size_t bytes;
  };
  std::map<P2PLink, std::deque<Queued>> sends, recvs;
  std::vector<std::size_t> pc(ranks, 0);
  std::vector<int> open_recvs(ranks, 0);
  for (;;) {
    bool progress = false;
    for (int r = 0; r < ranks; ++r)
      while (pc[r] < programs[r].size()) {
        const Step& s = programs[r][pc[r]];
        if (s.compute) {
          if (open_recvs[r] > 0) break;
        } else {
          const P2PLink link = cuda::link_of(r, s.op);
          (s.op.kind == P2POp::Kind::Send ? sends : recvs)[link].push_back(
              {r, s.message, s.op.bytes});
          if (s.op.kind == P2POp::Kind::Recv) ++open_recvs[r];
        }
        ++pc[r];
        progress = true;
      }
    for (auto& [link, q] : sends) {
      auto& rq = recvs[link];
      while (!q.empty() && !rq.empty()) {
        if (!(q.front().message == rq.front().message) || q.front().bytes != rq.front().bytes)
          return "link " + std::to_string(link.sender) + "->" + std::to_string(link.receiver) +
                 " pairs different messages";
        --open_recvs[rq.front().rank];
        q.pop_front();
        rq.pop_front();
        progress = true;
      }
    }
    bool done = true;
    for (int r = 0; r < ranks; ++r)
      done = done && pc[r] == programs[r].size() && open_recvs[r] == 0;
    if (done) return "";
    if (!progress) return "deadlock";
  }
}

// The alternative the plan avoids: one stream per rank, one communicator per (pair, channel), and
// each run of back-to-back transfers in one ncclGroupStart/End. A group finishes when each of its
// transfers has met its partner in the partner's current group.
std::string simulate_grouped_single_stream(const std::vector<std::vector<Step>>& programs) {
  const int ranks = static_cast<int>(programs.size());
  struct Item {
    P2POp op;
    Message message;
    int ordinal;  // among this rank's transfers of this kind to this peer on this channel
    bool done = false;
  };
  std::vector<std::vector<std::vector<Item>>> groups(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::map<std::tuple<int, int, int>, int> count;
    bool after_compute = true;
    for (const Step& s : programs[r]) {
      if (s.compute) {
        after_compute = true;
        continue;
      }
      if (after_compute) groups[r].emplace_back();
      after_compute = false;
      const int k =
          count[{static_cast<int>(s.op.kind), s.op.peer, static_cast<int>(s.op.channel)}]++;
      groups[r].back().push_back({s.op, s.message, k});
    }
  }
  std::vector<std::size_t> current(ranks, 0);
  for (;;) {
    bool progress = false, done = true;
    for (int r = 0; r < ranks; ++r) {
      if (current[r] == groups[r].size()) continue;
      done = false;
      for (Item& it : groups[r][current[r]]) {
        if (it.done || current[it.op.peer] == groups[it.op.peer].size()) continue;
        for (Item& p : groups[it.op.peer][current[it.op.peer]])
          if (!p.done && p.op.peer == r && p.op.kind != it.op.kind &&
              p.op.channel == it.op.channel && p.ordinal == it.ordinal) {
            if (!(p.message == it.message)) return "pairs different messages";
            it.done = p.done = true;
            progress = true;
          }
      }
    }
    for (int r = 0; r < ranks; ++r)
      while (current[r] < groups[r].size() &&
             std::all_of(groups[r][current[r]].begin(), groups[r][current[r]].end(),
                         [](const Item& i) { return i.done; })) {
        ++current[r];
        progress = true;
      }
    if (done) return "";
    if (!progress) return "deadlock";
  }
}

std::vector<std::vector<Step>> programs(const ScheduleSpec& spec, bool separate_channels = true) {
  std::vector<std::vector<Step>> p;
  for (int s = 0; s < spec.pp; ++s) p.push_back(program_of(spec, s, separate_channels));
  return p;
}

std::vector<ScheduleSpec> all_specs() {
  std::vector<ScheduleSpec> specs;
  for (const ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1})
    for (int pp : {2, 3, 4})
      for (int m : {1, 2, 3, 4, 8}) specs.push_back({kind, pp, 1, m});
  for (int pp : {2, 3, 4})
    for (int m : {pp, 2 * pp}) specs.push_back({ScheduleKind::Interleaved, pp, 2, m});
  return specs;
}

TEST(NcclP2P, EveryScheduleCompletesOnLinksWithTheTagsPairing) {
  for (const ScheduleSpec& spec : all_specs()) {
    SCOPED_TRACE(::testing::Message() << schedule_kind_name(spec.kind) << " pp=" << spec.pp
                                      << " m=" << spec.microbatches);
    EXPECT_EQ(simulate_links(programs(spec)), "");
  }
}

TEST(NcclP2P, LinksOfAStage) {
  using L = P2PLink;
  EXPECT_TRUE(cuda::pipeline_links(0, 1).empty());
  // pp 3, stage 1: activations 1->2 and 0->1, gradients 1->0 and 2->1.
  EXPECT_EQ(cuda::pipeline_links(1, 3), (std::vector<L>{{0, 1, P2PChannel::Activations},
                                                        {1, 0, P2PChannel::Gradients},
                                                        {1, 2, P2PChannel::Activations},
                                                        {2, 1, P2PChannel::Gradients}}));
  // pp 2: both directions carry both channels (the interleaved ring wraps).
  EXPECT_EQ(cuda::pipeline_links(0, 2).size(), 4u);
  // Every link a transfer uses is one its rank created.
  for (const ScheduleSpec& spec : all_specs())
    for (int s = 0; s < spec.pp; ++s) {
      const auto links = cuda::pipeline_links(s, spec.pp);
      for (const Step& st : program_of(spec, s, true))
        if (!st.compute) {
          EXPECT_TRUE(std::count(links.begin(), links.end(), cuda::link_of(s, st.op)) == 1)
              << schedule_kind_name(spec.kind) << " pp=" << spec.pp << " stage " << s;
        }
    }
}

// The simulators can fail. One stream per rank deadlocks even with back-to-back transfers
// grouped: in interleaved pp=2 both stages send a gradient (alone in its group) before the group
// that receives one.
TEST(NcclP2P, OneStreamPerRankDeadlocksInterleaved) {
  EXPECT_EQ(simulate_grouped_single_stream(programs({ScheduleKind::OneFOneB, 4, 1, 8})), "");
  EXPECT_EQ(simulate_grouped_single_stream(programs({ScheduleKind::Interleaved, 2, 2, 4})),
            "deadlock");
}

}  // namespace
}  // namespace pipelane::cuda_test
