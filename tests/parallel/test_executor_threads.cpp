// The executor without mpirun: a whole tp x dp x pp job as threads of this process (ThreadJob),
// each rank with its own one-thread CPU backend. Checks parallel equivalence against one process,
// that every wait of the schedule reaches the gap filler (also when the transfer has already
// arrived), and that the lowered schedules' transfers are received in the order they are sent.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <chrono>
#include <thread>
#include <vector>

#include "parallel/compute_after_waits.h"
#include "parallel/pipeline_executor.h"
#include "parallel/sites.h"
#include "parallel/thread_planes.h"
#include "parallel/wan_schedule.h"
#include "runtime/cpu/cpu_backend.h"

namespace pipelane {
namespace {

GptConfig tiny_model() {
  GptConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 8;
  c.vocab_size = 61;
  return c;
}

constexpr int kMicroBatch = 2, kSeq = 8, kGlobalMicrobatches = 4, kSteps = 3;

// Deterministic tokens for microbatch g of step s (the global stream; a replica takes its share).
std::vector<std::int32_t> tokens_of(int step, int global_mb, int shift) {
  std::vector<std::int32_t> out(kMicroBatch * kSeq);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int32_t>((step * 131 + global_mb * 31 + static_cast<int>(i) * 7 + shift) % 61);
  return out;
}

// Every (iteration, gap id) the filler was handed, and the compute after each gap it was told
// of; `told_before_end` stays true while every iteration's compute came before its end_iteration.
class RecordingFiller final : public GapFiller {
 public:
  void fill(int iteration, int gap_id, WaitKind, const std::function<bool()>& arrived) override {
    calls[{iteration, gap_id}] += 1;
    while (!arrived()) std::this_thread::yield();
  }
  void training_after_gaps(int iteration, const std::vector<TrainingAfterGap>& times) override {
    for (const TrainingAfterGap& t : times) after[{iteration, t.gap_id}] = t.compute_s;
  }
  void end_iteration(int iteration) override {
    bool told = false;
    for (const auto& [key, seconds] : after) told = told || key.first == iteration;
    told_before_end = told_before_end && told;
  }
  std::map<std::pair<int, int>, int> calls;
  std::map<std::pair<int, int>, double> after;
  bool told_before_end = true;
};

struct JobResult {
  std::vector<double> loss, grad_norm;  // per step (rank 0's view; every rank agrees)
  std::vector<std::vector<Instr>> instrs;  // per world rank
  std::vector<std::map<std::pair<int, int>, int>> fills;  // per world rank
  std::vector<std::map<std::pair<int, int>, double>> after;  // per world rank: compute after each gap
  std::vector<bool> told_before_end;                          // per world rank
};

// `sites` (empty: one site) splits the ranks into consecutive sites; `wan` lowers each rank's list.
// `adapt` may replace a rank's planes before its executor is made, `configure` set up its
// executor (an update gate) before the first step.
JobResult run_job(ParallelDims dims, ScheduleKind kind, int virtual_stages, bool with_filler,
                  const std::vector<int>& sites = {}, std::optional<WanSettings> wan = std::nullopt,
                  const std::function<void(Topology&, int)>& adapt = {},
                  const std::function<void(PipelineExecutor&, int)>& configure = {}) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < sites.size(); ++i) names.push_back("site" + std::to_string(i));
  const SitePlacement placement = place_on_sites(dims, SiteMap::from_counts(names, sites));
  ThreadJob job(dims);
  JobResult result;
  result.instrs.resize(dims.world());
  result.fills.resize(dims.world());
  result.after.resize(dims.world());
  result.told_before_end.resize(dims.world());
  std::mutex mutex;
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(dims.world());
  for (int rank = 0; rank < dims.world(); ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        Topology topo = job.topology(rank);
        if (adapt) adapt(topo, rank);
        const std::unique_ptr<Backend> backend = make_cpu_backend(1);
        ExecutorOptions o;
        o.model = tiny_model();
        o.schedule = {kind, dims.pp, virtual_stages, kGlobalMicrobatches / dims.dp};
        o.micro_batch = kMicroBatch;
        o.seq_len = kSeq;
        o.seed = 5;
        if (wan) o.wan = wan_route(placement, rank, *wan);
        PipelineExecutor exec(o, topo, *backend);
        if (configure) configure(exec, rank);
        RecordingFiller filler;
        if (with_filler) exec.set_gap_filler(&filler);
        const float loss_scale = 1.0f / (kGlobalMicrobatches * kMicroBatch * kSeq);
        for (int step = 0; step < kSteps; ++step) {
          std::vector<std::int32_t> tok, tgt;
          for (int k = 0; k < o.schedule.microbatches; ++k) {
            const int g = k * dims.dp + topo.me.dp;  // round-robin over replicas
            const auto t = tokens_of(step, g, 0), y = tokens_of(step, g, 1);
            tok.insert(tok.end(), t.begin(), t.end());
            tgt.insert(tgt.end(), y.begin(), y.end());
          }
          const StepStats st = exec.step(tok.data(), tgt.data(), loss_scale, 1e-2f, step + 1);
          if (rank == 0) {
            result.loss.push_back(st.loss_sum * loss_scale);
            result.grad_norm.push_back(st.grad_norm);
          }
        }
        std::lock_guard lock(mutex);
        result.instrs[rank] = exec.instructions();
        result.fills[rank] = filler.calls;
        result.after[rank] = filler.after;
        result.told_before_end[rank] = filler.told_before_end;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < dims.world(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return result;
}

struct Case {
  const char* name;
  ParallelDims dims;
  ScheduleKind kind;
  int v;
  // The case's name in test names and failures, not gtest's dump of the struct's bytes.
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class ExecutorThreads : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorThreads, MatchesOneProcess) {
  const Case& c = GetParam();
  const JobResult one = run_job(ParallelDims{1, 1, 1}, ScheduleKind::OneFOneB, 1, false);
  const JobResult got = run_job(c.dims, c.kind, c.v, false);
  ASSERT_EQ(got.loss.size(), static_cast<std::size_t>(kSteps));
  // 1e-5: the same arithmetic summed in another order across ranks (see the MPI equivalence
  // tests); losses must also move, or the test would pass on a model that does not train.
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got.loss[s], one.loss[s], 1e-5 * one.loss[s]) << c.name << " step " << s + 1;
    EXPECT_NEAR(got.grad_norm[s], one.grad_norm[s], 1e-5 * one.grad_norm[s]) << c.name << " step " << s + 1;
  }
  EXPECT_NE(one.loss.front(), one.loss.back());
}

const Case kCases[] = {
    {"pp2_1f1b", {1, 1, 2}, ScheduleKind::OneFOneB, 1},
    {"pp2_gpipe", {1, 1, 2}, ScheduleKind::GPipe, 1},
    {"pp2_zbh1", {1, 1, 2}, ScheduleKind::ZeroBubbleH1, 1},
    {"pp2_interleaved", {1, 1, 2}, ScheduleKind::Interleaved, 2},
    {"pp4_1f1b", {1, 1, 4}, ScheduleKind::OneFOneB, 1},
    {"tp2", {2, 1, 1}, ScheduleKind::OneFOneB, 1},
    {"dp2", {1, 2, 1}, ScheduleKind::OneFOneB, 1},
    {"tp2_pp2_zbh1", {2, 1, 2}, ScheduleKind::ZeroBubbleH1, 1},
    {"dp2_pp2", {1, 2, 2}, ScheduleKind::OneFOneB, 1},
};
INSTANTIATE_TEST_SUITE_P(Grids, ExecutorThreads, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Across sites the lists are lowered (cross-site messages striped and, under temporal sharing,
// sent in turns by the pipelines sharing a link): that changes timing only, so losses and
// gradient norms are those of the same grid on one site, bit for bit.
TEST(ExecutorThreadsWan, LossesAreBitIdenticalToOneSite) {
  struct WanCase {
    ParallelDims dims;
    ScheduleKind kind;
    int v;
    std::vector<int> sites;
  };
  const WanCase cases[] = {
      {{1, 2, 2}, ScheduleKind::OneFOneB, 1, {2, 2}},
      {{1, 2, 2}, ScheduleKind::Interleaved, 2, {2, 2}},
      {{1, 2, 4}, ScheduleKind::ZeroBubbleH1, 1, {4, 4}},
      {{2, 2, 2}, ScheduleKind::GPipe, 1, {4, 4}},
  };
  for (const WanCase& c : cases) {
    const JobResult one_site = run_job(c.dims, c.kind, c.v, false);
    for (WanSharing sharing : {WanSharing::Temporal, WanSharing::Concurrent}) {
      const JobResult wan = run_job(c.dims, c.kind, c.v, true, c.sites, WanSettings{sharing, 3});
      ASSERT_EQ(wan.loss.size(), one_site.loss.size());
      for (std::size_t s = 0; s < wan.loss.size(); ++s) {
        EXPECT_EQ(wan.loss[s], one_site.loss[s]) << schedule_kind_name(c.kind) << " step " << s + 1;
        EXPECT_EQ(wan.grad_norm[s], one_site.grad_norm[s]) << schedule_kind_name(c.kind) << " step " << s + 1;
      }
      // The lists the executor ran are the lowered ones: some transfers cross, and under temporal
      // sharing their sends carry turns.
      int crossing = 0, turns = 0;
      for (const auto& list : wan.instrs)
        for (const Instr& in : list) {
          crossing += in.wan.crosses();
          turns += in.wan.has_turn();
        }
      EXPECT_GT(crossing, 0);
      EXPECT_EQ(turns > 0, sharing == WanSharing::Temporal);
    }
  }
}

// MPI sends a large message by rendezvous: the send completes only once its receive is posted. A
// plane that does the same, and logs per rank what the executor posts and what it waits for.
struct RendezvousLog {
  std::atomic<int> receives_posted[2][2] = {};  // [plane][receiving stage]
  std::vector<std::string> events[2];           // per stage, written by that stage's thread only
};

class RendezvousPlane final : public DataPlane {
 public:
  RendezvousPlane(std::unique_ptr<DataPlane> inner, int plane, const char* name, RendezvousLog& log)
      : inner_(std::move(inner)), plane_(plane), name_(name), log_(log) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<Event> send(const void* data, std::size_t bytes, int peer, Stream& stream) override {
    inner_->send(data, bytes, peer, stream)->synchronize();  // buffered: the copy is made
    return std::make_unique<SendEvent>(*this, peer, sends_++);
  }
  std::unique_ptr<Event> recv(void* data, std::size_t bytes, int peer, Stream& stream) override {
    auto e = inner_->recv(data, bytes, peer, stream);
    log_.events[rank()].push_back(std::string("post recv ") + name_ + " #" + std::to_string(receives_));
    log_.receives_posted[plane_][rank()] = ++receives_;
    return e;
  }
  void all_reduce_sum(float* d, std::size_t n, Stream& s) override { inner_->all_reduce_sum(d, n, s); }
  void all_reduce_max(float* d, std::size_t n, Stream& s) override { inner_->all_reduce_max(d, n, s); }
  std::unique_ptr<Event> all_reduce_sum_async(float* d, std::size_t n, Stream& s) override {
    return inner_->all_reduce_sum_async(d, n, s);
  }
  void all_gather(const float* in, float* out, std::size_t n, Stream& s) override { inner_->all_gather(in, out, n, s); }
  std::unique_ptr<Event> reduce_scatter_sum_async(float* d, std::size_t n, Stream& s) override {
    return inner_->reduce_scatter_sum_async(d, n, s);
  }
  std::unique_ptr<Event> all_gather_in_place_async(float* d, std::size_t n, Stream& s) override {
    return inner_->all_gather_in_place_async(d, n, s);
  }

 private:
  class SendEvent final : public Event {
   public:
    SendEvent(RendezvousPlane& plane, int peer, int index) : plane_(plane), peer_(peer), index_(index) {}
    void record(Stream&) override {}
    bool query() const override {
      if (!done_) plane_.note("query", index_);
      done_ = done_ || plane_.log_.receives_posted[plane_.plane_][peer_] > index_;
      return done_;
    }
    void synchronize() override {
      if (!done_) plane_.note("wait for", index_);
      while (!query()) std::this_thread::yield();
    }
    void wait_on(Stream&) override { synchronize(); }
    double elapsed_ms_since(const Event&) const override { return 0.0; }

   private:
    RendezvousPlane& plane_;
    int peer_, index_;
    mutable bool done_ = false;
  };
  void note(const char* what, int index) {
    log_.events[rank()].push_back(std::string(what) + " send " + name_ + " #" + std::to_string(index));
  }
  std::unique_ptr<DataPlane> inner_;
  int plane_;
  const char* name_;
  RendezvousLog& log_;
  int sends_ = 0, receives_ = 0;
};

// The last stage posts the receive of its next activation right after sending a gradient, not
// once that gradient's send completes: under rendezvous that send completes only when the first
// stage posts its receive, so waiting for it first put one more transfer on the critical path
// (over a WAN, 50-90 ms a message). Losses are unchanged.
TEST(ExecutorThreadsRendezvous, ReceivesArePostedWhileTheSlotsSendsDrain) {
  const ParallelDims dims{1, 1, 2};
  RendezvousLog log;
  const JobResult plain = run_job(dims, ScheduleKind::OneFOneB, 1, false);
  const JobResult got = run_job(dims, ScheduleKind::OneFOneB, 1, false, {}, std::nullopt, [&](Topology& t, int) {
    t.pp_forward = std::make_unique<RendezvousPlane>(std::move(t.pp_forward), 0, "fwd", log);
    t.pp_backward = std::make_unique<RendezvousPlane>(std::move(t.pp_backward), 1, "bwd", log);
  });
  EXPECT_EQ(got.loss, plain.loss);
  const std::vector<std::string>& last = log.events[1];
  const auto first = [&](const std::string& what) {
    return std::find(last.begin(), last.end(), what) - last.begin();
  };
  const int receives = kSteps * kGlobalMicrobatches;
  for (int j = 1; j < receives; ++j) {
    if (j % kGlobalMicrobatches == 0) continue;  // the step's first receive follows the step's end
    const auto posted = first("post recv fwd #" + std::to_string(j));
    ASSERT_LT(posted, static_cast<std::ptrdiff_t>(last.size())) << j;
    for (const char* wait : {"wait for send bwd #", "query send bwd #"})
      EXPECT_LT(posted, first(wait + std::to_string(j - 1)))
          << "the last stage waited for gradient " << j - 1 << " before posting the receive of activation " << j;
  }
}

// Every wait instruction reaches the filler exactly once per iteration, arrived or not: a
// deterministic lane plan can then run in full whatever the timing.
TEST(ExecutorThreadsFiller, EveryWaitReachesTheFillerEveryIteration) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    const JobResult got = run_job(ParallelDims{1, 1, 2}, kind, 1, true);
    for (std::size_t rank = 0; rank < got.instrs.size(); ++rank) {
      std::map<std::pair<int, int>, int> expected;
      for (int step = 1; step <= kSteps; ++step)
        for (std::size_t i = 0; i < got.instrs[rank].size(); ++i)
          if (is_wait(got.instrs[rank][i].op)) expected[{step, static_cast<int>(i)}] = 1;
      EXPECT_FALSE(expected.empty());
      EXPECT_EQ(got.fills[rank], expected) << schedule_kind_name(kind) << " rank " << rank;
      // Each step the filler also hears, before end_iteration, how long training computed after
      // each wait that compute followed (every wait but the gradient sync, which the optimizer follows).
      std::set<std::pair<int, int>> followed;
      for (const auto& [key, calls] : expected)
        if (got.instrs[rank][key.second].op != Op::GradSync) followed.insert(key);
      std::set<std::pair<int, int>> told;
      for (const auto& [key, seconds] : got.after[rank]) {
        told.insert(key);
        EXPECT_GT(seconds, 0) << "step " << key.first << " gap " << key.second;
      }
      EXPECT_EQ(told, followed) << schedule_kind_name(kind) << " rank " << rank;
      EXPECT_TRUE(got.told_before_end[rank]);
    }
  }
}

// Compute after a wait: the compute instructions up to the next wait, sends and the optimizer left out.
TEST(ComputeAfterWaits, SumsTheComputeBetweenAWaitAndTheNext) {
  const auto record = [](Op op, double start, double end) { return InstrRecord{Instr{op}, start, end, 0}; };
  const std::vector<InstrRecord> records = {
      record(Op::RecvFwd, 0.0, 1.0),  record(Op::Fwd, 1.0, 1.5),      record(Op::SendFwd, 1.5, 1.75),
      record(Op::RecvBwd, 1.75, 2.0), record(Op::Bwd, 2.0, 2.5),      record(Op::BwdWeight, 2.5, 2.625),
      record(Op::SendBwd, 2.625, 3.0), record(Op::RecvBwd, 3.0, 3.5), record(Op::GradSync, 3.5, 4.0),
      record(Op::OptimizerStep, 4.0, 5.0)};
  const std::vector<TrainingAfterGap> after = compute_after_waits(records);
  ASSERT_EQ(after.size(), 2u) << "the RecvBwd and GradSync at 7 and 8 have no compute before the next wait";
  EXPECT_EQ(after[0].gap_id, 0);
  EXPECT_DOUBLE_EQ(after[0].compute_s, 0.5);
  EXPECT_EQ(after[1].gap_id, 3);
  EXPECT_DOUBLE_EQ(after[1].compute_s, 0.625);
  // Where the process's CPU time was measured (lanes on), it counts instead of the wall time: a
  // core taken by another process is not training's compute.
  std::vector<InstrRecord> measured = records;
  measured[1].cpu_s = 0.25;   // Fwd after the first wait: 0.5 s of wall, 0.25 s of CPU
  measured[4].cpu_s = 0.5;    // Bwd: as long as its wall time
  const std::vector<TrainingAfterGap> cpu = compute_after_waits(measured);
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_DOUBLE_EQ(cpu[0].compute_s, 0.25);
  EXPECT_DOUBLE_EQ(cpu[1].compute_s, 0.5 + 0.125);  // BwdWeight unmeasured: its wall time
}

TEST(ComputeAfterWaits, ProcessCpuSecondsGrowWithWorkAndNotWithSleep) {
  const double start = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double slept = process_cpu_seconds() - start;
  volatile double sink = 0;
  const double busy_start = process_cpu_seconds();
  while (process_cpu_seconds() - busy_start < 0.02) sink = sink + 1;
  EXPECT_LT(slept, 0.04);  // 50 ms asleep: a wall clock would read >= 0.05
  EXPECT_GE(process_cpu_seconds() - busy_start, 0.02);
}

// The data plane matches messages by issue order without tags: that is only correct because
// every schedule receives each channel's messages in the order they were sent.
TEST(ScheduleLowering, TransfersAreReceivedInTheOrderTheyAreSent) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1})
        EXPECT_NO_THROW(check_transfer_order(ScheduleSpec{kind, p, 1, m})) << p << " " << m;
      if (m % p == 0) {
        for (int v = 2; v <= 4; ++v)
          EXPECT_NO_THROW(check_transfer_order(ScheduleSpec{ScheduleKind::Interleaved, p, v, m}))
              << p << " " << m << " v " << v;
      }
    }
}

TEST(ScheduleLowering, PeersAreTheNeighbouringVirtualStages) {
  const ScheduleSpec spec{ScheduleKind::Interleaved, 2, 2, 4};
  for (int stage = 0; stage < 2; ++stage)
    for (const Instr& in : build_schedule(spec, stage)) {
      if (!is_transfer(in.op)) {
        EXPECT_EQ(in.peer_stage, -1);
        continue;
      }
      const bool towards_next = in.op == Op::SendFwd || in.op == Op::RecvBwd;
      const StageChunk want = towards_next ? next_virtual_stage(spec, stage, in.chunk)
                                           : prev_virtual_stage(spec, stage, in.chunk);
      EXPECT_EQ(in.peer_stage, want.stage);
      EXPECT_EQ(in.peer_chunk, want.chunk);
    }
}

// A rank's world control plane, counting its scalar sums (the gradient norm's, the loss's).
class CountingWorld final : public ControlPlane {
 public:
  CountingWorld(std::unique_ptr<ControlPlane> inner, int& sums) : inner_(std::move(inner)), sums_(sums) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<CommRequest> isend(const void* data, std::size_t bytes, int dest, int tag) override {
    return inner_->isend(data, bytes, dest, tag);
  }
  std::unique_ptr<CommRequest> irecv(void* data, std::size_t bytes, int src, int tag) override {
    return inner_->irecv(data, bytes, src, tag);
  }
  void all_reduce_sum(double* data, std::size_t n) override {
    ++sums_;
    inner_->all_reduce_sum(data, n);
  }
  void all_reduce_max(float* data, std::size_t n) override { inner_->all_reduce_max(data, n); }
  void broadcast(void* data, std::size_t bytes, int root) override { inner_->broadcast(data, bytes, root); }
  void barrier() override { inner_->barrier(); }
  std::unique_ptr<BarrierRequest> ibarrier() override { return inner_->ibarrier(); }

 private:
  std::unique_ptr<ControlPlane> inner_;
  int& sums_;
};

// The trainer always sets an update gate, which is handed the world's loss sum at OptimizerStep:
// the step reports that sum rather than summing again, so a step makes two world sums (gradient
// norm, loss) with a gate as without, and reports the same loss bits.
TEST(ExecutorThreadsLossSum, TheWorldLossIsSummedOnceAStepWithOrWithoutAnUpdateGate) {
  const ParallelDims dims{1, 2, 2};
  std::vector<double> losses[2];
  for (const bool gated : {false, true}) {
    std::vector<int> sums(dims.world(), 0);
    std::vector<std::vector<double>> gate_losses(dims.world());
    const auto count = [&sums](Topology& topo, int rank) {
      topo.world = std::make_unique<CountingWorld>(std::move(topo.world), sums[rank]);
    };
    const auto gate = [&](PipelineExecutor& exec, int rank) {
      if (gated)
        exec.set_update_gate([&gate_losses, rank](double loss_sum, double) {
          gate_losses[rank].push_back(loss_sum);
          return true;
        });
    };
    const JobResult r = run_job(dims, ScheduleKind::OneFOneB, 1, false, {}, std::nullopt, count, gate);
    for (int rank = 0; rank < dims.world(); ++rank) EXPECT_EQ(sums[rank], 2 * kSteps) << "rank " << rank;
    if (gated) {
      const float loss_scale = 1.0f / (kGlobalMicrobatches * kMicroBatch * kSeq);
      ASSERT_EQ(gate_losses[0].size(), r.loss.size());
      for (std::size_t s = 0; s < r.loss.size(); ++s) EXPECT_EQ(gate_losses[0][s] * loss_scale, r.loss[s]);
    }
    losses[gated] = r.loss;
  }
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace pipelane
