// Lanes on the CUDA backend built for the CPU (kernels emulated, runtime faked): a tiny GPT
// trained through the real PipelineExecutor, two pipeline stages as threads, with the prefill and
// smalltrain lanes on (device lanes: pool arenas, steps enqueued on their Low streams, timed by
// events) against lanes off. The losses are bit-identical, the lanes really ran in the gaps with
// the count frozen from the profile, and a lane that goes past its pool arena's quota is
// quarantined while training goes on, bit for bit. The gap scheduler, on training's host thread,
// only posts device steps: it returns while a lane's stream is held, even for steps that bring a
// value back to the host.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "datasets/token_store.h"
#include "lanes/builtin/bfs_lane.h"
#include "lanes/builtin/graphsgd_lane.h"
#include "lanes/builtin/imageproc_lane.h"
#include "lanes/builtin/pagerank_lane.h"
#include "lanes/builtin/prefill_lane.h"
#include "lanes/builtin/smalltrain_lane.h"
#include "lanes/gap_scheduler.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/backend/cuda_streams.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#include "tests/cuda/emulated_stages.h"
#include "tests/cuda/executor_runs.h"
#include "tests/datasets/test_files.h"

namespace pipelane::cuda_test {
namespace {

using test_support::TempDir;

constexpr int kSteps = 3;  // one profile iteration, two with lanes
constexpr int kPipelineStages = 2;
constexpr std::size_t kQuota = std::size_t{4} << 20;

// A device lane that computes a little on its stream, then asks its arena for more than the
// quota on its `fail_at`-th step: the refusal must be the lane's error, never training's.
class GreedyLane : public Lane {
 public:
  // `arena_kind` receives the kind of memory its arena is (the test reads it after the run).
  GreedyLane(int fail_at, MemoryKind* arena_kind) : fail_at_(fail_at), arena_kind_(arena_kind) {}
  std::string name() const override { return "greedy"; }
  std::string work_unit() const override { return "elements"; }
  bool runs_on_device() const override { return true; }
  void setup(LaneContext& ctx) override {
    *arena_kind_ = ctx.arena.kind();
    x_ = ctx.arena.allocate_n<float>(kElements, "greedy.x");
  }
  double step(LaneContext& ctx) override {
    if (++steps_ == fail_at_) ctx.arena.allocate(ctx.arena.capacity() - ctx.arena.used() + 1, "greedy.more");
    ctx.backend.scale(x_, 0.5f, kElements, ctx.stream);
    return kElements;
  }
  bool finished() const override { return false; }
  std::string save() const override { return ""; }
  void load(const std::string&) override {}
  nlohmann::json report() const override { return {{"steps", steps_}}; }

 private:
  static constexpr std::size_t kElements = 1024;
  int fail_at_;
  int steps_ = 0;
  MemoryKind* arena_kind_;
  float* x_ = nullptr;
};

// A corpus for smalltrain: documents counting upwards modulo 32.
std::string write_corpus(const TempDir& dir) {
  TokenSplit split;
  split.doc_offsets.push_back(0);
  for (std::uint32_t d = 0; d < 20; ++d) {
    for (std::uint32_t i = 0; i < 40; ++i) split.tokens.push_back((d * 7 + i) % 32);
    split.doc_offsets.push_back(split.tokens.size());
  }
  TokenStoreMeta meta;
  meta.tokenizer = "test";
  meta.vocab_size = 32;
  const std::string path = dir.file("corpus.h5");
  write_token_store(path, meta, split, TokenSplit{{}, {0}});
  return path;
}

// `lanes` lanes of kQuota each, profiled for one iteration, `calibration_steps` each.
GapSchedulerOptions emulated_lane_options(int lanes, int calibration_steps) {
  GapSchedulerOptions options;
  options.lane_memory_bytes = kQuota;
  options.stage_memory_bytes = static_cast<std::size_t>(lanes) * kQuota;
  options.profile_iterations = 1;
  options.calibration_steps = calibration_steps;
  // The emulator's gaps are short next to its kernels, and a gap can be measured at a microsecond
  // (the transfer already there; one process's gradient sync always is): a huge margin places
  // steps in every gap and the bound keeps them few, whatever the timing. What is checked is that
  // they run where the frozen plan put them and change no bit, not how many would fit.
  options.margin = 1e9;
  options.max_device_steps_per_gap = 4;
  // Host-side deadlines and runaway rules judge a busy 2-core machine, not the lanes here.
  options.step_deadline_min_s = 60;
  options.lane_timing = false;
  options.quarantine_factor = 1e9;
  return options;
}

struct StageResult {
  TrainRun run;
  StageLaneSummary summary;
  LanePlan plan;
  std::vector<GapRecord> gaps;
  std::vector<LaneStepRecord> steps;
  std::map<std::string, bool> on_device;
  MemoryKind greedy_arena = MemoryKind::Host;
  std::string error;
};

struct LaneSetup {
  bool prefill = false, smalltrain = false;
  int greedy_fails_at = 0;  // 0: no greedy lane
  bool pagerank = false, imageproc = false;
  bool graph_lanes = false;  // bfs and graphsgd
  std::string output_root;  // the lanes' output directories (imageproc writes files)
};

// One stage of `pp` (this rank's topology) trained on `backend` with the lanes `lanes` asks for
// (none: off).
void train_stage(Topology& topo, Backend* backend, int rank, int pp, const LaneSetup& lanes,
                 const std::string& corpus, StageResult& out) {
  std::vector<LaneSpec> specs;
  const auto tiny = [](std::map<std::string, std::string> extra) {
    std::map<std::string, std::string> o = {{"layers", "1"}, {"d_model", "16"}, {"heads", "2"},
                                            {"seq_len", "8"}, {"vocab_size", "32"}};
    o.insert(extra.begin(), extra.end());
    return o;
  };
  if (lanes.prefill)
    specs.push_back({make_prefill_lane(),
                     LaneOptions("prefill", tiny({{"chunk_tokens", "4"}, {"rate_per_s", "100000"},
                                                  {"requests", "400"}, {"prompt_min", "4"}}),
                                 "test")});
  if (lanes.smalltrain)
    specs.push_back({make_smalltrain_lane(),
                     LaneOptions("smalltrain",
                                 tiny({{"data", corpus}, {"micro_batch", "1"}, {"accumulation", "1"},
                                       {"steps", "100000"}, {"eval_batches", "0"}}),
                                 "test")});
  if (lanes.pagerank)
    specs.push_back({make_pagerank_lane(),
                     LaneOptions("pagerank", {{"generate", "rmat"}, {"scale", "8"}, {"edge_factor", "4"},
                                              {"slice_edges", "300"}, {"max_iterations", "1000"}, {"tolerance", "0"}},
                                 "test")});
  if (lanes.graph_lanes) {
    specs.push_back({make_bfs_lane(), LaneOptions("bfs", {{"generate", "rmat"}, {"scale", "8"}, {"edge_factor", "4"},
                                                           {"slice_edges", "300"}, {"traversals", "100000"}},
                                                  "test")});
    specs.push_back({make_graphsgd_lane(),
                     LaneOptions("graphsgd", {{"generate", "rmat"}, {"scale", "7"}, {"edge_factor", "4"},
                                              {"slice_edges", "100"}, {"iterations", "100000"}, {"latent_dim", "8"}},
                                 "test")});
  }
  if (lanes.imageproc)
    specs.push_back({make_imageproc_lane(),
                     LaneOptions("imageproc", {{"generate", "1000"}, {"width", "32"}, {"height", "24"}, {"out_width", "16"}, {"out_height", "12"}}, "test")});
  if (lanes.greedy_fails_at > 0)
    specs.push_back({std::make_unique<GreedyLane>(lanes.greedy_fails_at, &out.greedy_arena), {}});
  if (specs.empty()) {
    out.run = train_tiny(topo, *backend, pp, kSteps);
    return;
  }
  GapSchedulerOptions options = emulated_lane_options(4, 2);
  options.stage = rank;
  options.rank = rank;
  options.seed = 3;
  options.lane_memory_bytes = kQuota;
  options.stage_memory_bytes = 4 * kQuota;
  options.profile_iterations = 1;
  options.calibration_steps = 2;
  // The emulator's gaps are short next to its kernels, and a gap can be measured at a microsecond
  // (the transfer already there; one process's gradient sync always is): a huge margin places
  // steps in every gap and the bound keeps them few, whatever the timing. What is checked is that
  // they run where the frozen plan put them and change no bit, not how many would fit.
  options.margin = 1e9;
  options.max_device_steps_per_gap = 4;
  // Host-side deadlines and runaway rules judge a busy 2-core machine, not the lanes here.
  options.step_deadline_min_s = 60;
  options.lane_timing = false;
  options.quarantine_factor = 1e9;
  options.output_root = lanes.output_root;
  GapScheduler scheduler(*backend, std::move(specs), options, std::chrono::steady_clock::now(),
                         [](const std::string&) {});
  scheduler.calibrate();
  out.run = train_tiny(topo, *backend, pp, kSteps, &scheduler);
  scheduler.teardown();
  out.summary = scheduler.summary();
  out.plan = scheduler.plan();
  out.gaps = scheduler.gap_records();
  out.steps = scheduler.step_records();
  for (const std::string& name : scheduler.lane_names()) out.on_device[name] = scheduler.on_device(name);
}

// Both stages as threads; lanes on every stage when `lanes` asks for any.
std::vector<StageResult> train_two_stages(const LaneSetup& lanes, const std::string& corpus) {
  const ParallelDims dims{1, 1, kPipelineStages};
  std::vector<StageResult> results(dims.world());
  const std::vector<std::string> errors = run_emulated_stages(dims, [&](int rank, Topology& topo, Backend& backend) {
    train_stage(topo, &backend, rank, dims.pp, lanes, corpus, results[rank]);
  });
  for (int rank = 0; rank < dims.world(); ++rank) results[rank].error += errors[rank];
  return results;
}

// One process, one stage, deferred streams (each its own thread: lane kernels really run next to
// training's, and events complete later than recorded). Its one wait is the gradient sync.
StageResult train_one_process(const LaneSetup& lanes, const std::string& corpus) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  StageResult out;
  try {
    const auto backend = cuda_emu::make_emulated_cuda_backend();
    Topology topo = Topology::single_process(*backend);
    train_stage(topo, backend.get(), 0, 1, lanes, corpus, out);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

void expect_bit_identical(const TrainRun& got, const TrainRun& want) {
  ASSERT_EQ(got.loss.size(), want.loss.size());
  for (std::size_t s = 0; s < want.loss.size(); ++s) {
    EXPECT_EQ(std::memcmp(&got.loss[s], &want.loss[s], sizeof(double)), 0)
        << "step " << s + 1 << ": " << got.loss[s] << " vs " << want.loss[s];
    EXPECT_EQ(std::memcmp(&got.grad_norm[s], &want.grad_norm[s], sizeof(double)), 0) << "step " << s + 1;
  }
}

class CudaEmulatedLanes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    corpus_dir_ = new TempDir();
    corpus_ = write_corpus(*corpus_dir_);
    off_ = new std::vector<StageResult>(train_two_stages({}, corpus_));
  }
  static void TearDownTestSuite() {
    delete off_;
    delete corpus_dir_;
  }
  static TempDir* corpus_dir_;
  static std::string corpus_;
  static std::vector<StageResult>* off_;
};
TempDir* CudaEmulatedLanes::corpus_dir_ = nullptr;
std::string CudaEmulatedLanes::corpus_;
std::vector<StageResult>* CudaEmulatedLanes::off_ = nullptr;

TEST_F(CudaEmulatedLanes, PrefillAndSmalltrainRunOnTheDeviceAndChangeNoBit) {
  const std::vector<StageResult> on = train_two_stages({true, true, 0}, corpus_);
  for (int rank = 0; rank < kPipelineStages; ++rank) {
    const StageResult& r = on[rank];
    ASSERT_EQ(r.error, "") << "rank " << rank;
    ASSERT_EQ((*off_)[rank].error, "") << "rank " << rank;
    SCOPED_TRACE("rank " + std::to_string(rank));
    expect_bit_identical(r.run, (*off_)[0].run);
    for (const char* lane : {"prefill", "smalltrain"}) {
      SCOPED_TRACE(lane);
      EXPECT_TRUE(r.on_device.at(lane));
      const LaneStats& stats = r.summary.lanes.at(lane);
      EXPECT_EQ(stats.runs_on, "device");
      EXPECT_FALSE(stats.quarantined) << stats.quarantine_reason;
      EXPECT_GT(stats.steps, stats.calibration_steps) << "no step ran in a gap";
      EXPECT_GT(stats.units, stats.calibration_units);
      EXPECT_GT(stats.lane_s, 0) << "event timing";
    }
    // Every step's interval comes from its events on the lane stream.
    for (const LaneStepRecord& s : r.steps) EXPECT_LE(s.start_s, s.end_s);
    // The count of lane steps of every gap after the profile is the frozen plan's.
    ASSERT_FALSE(r.plan.empty());
    int filled = 0;
    for (const GapRecord& g : r.gaps) {
      if (g.profiling) continue;
      const auto planned = r.plan.find(g.gap_id);
      const std::size_t want = planned == r.plan.end() ? 0 : planned->second.size();
      EXPECT_EQ(static_cast<std::size_t>(g.lane_steps), want) << "iteration " << g.iteration << " gap " << g.gap_id;
      filled += g.lane_steps;
    }
    EXPECT_GT(filled, 0);
  }
}

// pagerank's step is Backend::pagerank_step on the lane stream; imageproc stays a host lane.
TEST_F(CudaEmulatedLanes, PagerankRunsOnTheDeviceImageprocOnTheCpuAndNoBitChanges) {
  TempDir out;
  LaneSetup setup;
  setup.pagerank = setup.imageproc = true;
  setup.output_root = out.path().string();
  const std::vector<StageResult> on = train_two_stages(setup, corpus_);
  for (int rank = 0; rank < kPipelineStages; ++rank) {
    const StageResult& r = on[rank];
    ASSERT_EQ(r.error, "") << "rank " << rank;
    SCOPED_TRACE("rank " + std::to_string(rank));
    expect_bit_identical(r.run, (*off_)[0].run);
    EXPECT_TRUE(r.on_device.at("pagerank"));
    EXPECT_FALSE(r.on_device.at("imageproc"));
    const LaneStats& pagerank = r.summary.lanes.at("pagerank");
    EXPECT_EQ(pagerank.runs_on, "device");
    EXPECT_EQ(r.summary.lanes.at("imageproc").runs_on, "cpu");
    EXPECT_FALSE(pagerank.quarantined) << pagerank.quarantine_reason;
    EXPECT_GT(pagerank.steps, pagerank.calibration_steps) << "no step ran in a gap";
    EXPECT_GT(pagerank.units, pagerank.calibration_units);
    EXPECT_GT(pagerank.lane_s, 0) << "event timing";
    EXPECT_EQ(pagerank.report.at("precision"), "fp32");
    EXPECT_GT(pagerank.report.at("edges_processed").get<std::uint64_t>(), 0u);
  }
}

// bfs and graphsgd run their Backend steps on the lane stream in the gaps; training's bits stay.
TEST_F(CudaEmulatedLanes, BfsAndGraphSgdRunOnTheDeviceAndNoBitChanges) {
  LaneSetup setup;
  setup.graph_lanes = true;
  const std::vector<StageResult> on = train_two_stages(setup, corpus_);
  for (int rank = 0; rank < kPipelineStages; ++rank) {
    const StageResult& r = on[rank];
    ASSERT_EQ(r.error, "") << "rank " << rank;
    SCOPED_TRACE("rank " + std::to_string(rank));
    expect_bit_identical(r.run, (*off_)[0].run);
    for (const char* name : {"bfs", "graphsgd"}) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(r.on_device.at(name));
      const LaneStats& lane = r.summary.lanes.at(name);
      EXPECT_EQ(lane.runs_on, "device");
      EXPECT_FALSE(lane.quarantined) << lane.quarantine_reason;
      EXPECT_GT(lane.steps, lane.calibration_steps) << "no step ran in a gap";
      EXPECT_GT(lane.units, lane.calibration_units);
      EXPECT_NE(lane.report.at("step").get<std::string>().find("Backend::"), std::string::npos);
    }
  }
}

TEST_F(CudaEmulatedLanes, AnOverQuotaAllocationQuarantinesTheLaneAndTrainingGoesOn) {
  // The greedy lane's 4th step (2 calibration steps, then the gaps) asks past its quota.
  const std::vector<StageResult> on = train_two_stages({false, false, 4}, corpus_);
  for (int rank = 0; rank < kPipelineStages; ++rank) {
    const StageResult& r = on[rank];
    ASSERT_EQ(r.error, "") << "rank " << rank;
    SCOPED_TRACE("rank " + std::to_string(rank));
    expect_bit_identical(r.run, (*off_)[0].run);
    const LaneStats& greedy = r.summary.lanes.at("greedy");
    EXPECT_TRUE(r.on_device.at("greedy"));
    EXPECT_EQ(r.greedy_arena, MemoryKind::Device);  // the pool's, not host memory
    EXPECT_TRUE(greedy.quarantined);
    EXPECT_NE(greedy.quarantine_reason.find("went past its arena quota"), std::string::npos)
        << greedy.quarantine_reason;
    EXPECT_NE(greedy.quarantine_reason.find("lane greedy stage " + std::to_string(rank)), std::string::npos)
        << greedy.quarantine_reason;
    EXPECT_GE(greedy.steps, 3) << "it ran in a gap before it failed";
  }
}

TEST_F(CudaEmulatedLanes, DeferredStreamsOneProcessChangeNoBit) {
  const StageResult off = train_one_process({}, corpus_);
  const StageResult on = train_one_process({true, true, 0}, corpus_);
  ASSERT_EQ(off.error, "");
  ASSERT_EQ(on.error, "");
  expect_bit_identical(on.run, off.run);
  for (const char* lane : {"prefill", "smalltrain"}) {
    SCOPED_TRACE(lane);
    const LaneStats& stats = on.summary.lanes.at(lane);
    EXPECT_FALSE(stats.quarantined) << stats.quarantine_reason;
    EXPECT_GT(stats.steps, stats.calibration_steps) << "no step ran in the gradient sync's gap";
    EXPECT_GT(stats.lane_s, 0) << "event timing";
  }
}

// smalltrain's state crosses the device boundary through copies (its buffers are device memory):
// on deferred streams, a lane restored from save() continues with bit-identical losses.
TEST_F(CudaEmulatedLanes, SmalltrainResumesBitIdenticallyOnTheDevice) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto backend = cuda_emu::make_emulated_cuda_backend();
  const LaneOptions options("smalltrain",
                            {{"data", corpus_}, {"layers", "1"}, {"d_model", "16"}, {"heads", "2"}, {"seq_len", "8"},
                             {"vocab_size", "32"}, {"micro_batch", "1"}, {"accumulation", "2"}, {"steps", "100"},
                             {"eval_batches", "0"}},
                            "test");
  struct Instance {
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Arena> arena;
    std::unique_ptr<LaneContext> ctx;
    std::unique_ptr<Lane> lane = make_smalltrain_lane();
    Instance(Backend& b, const LaneOptions& o)
        : stream(b.create_stream(StreamPriority::Low)), arena(b.create_arena("lane", kQuota, MemoryKind::DevicePool)),
          ctx(new LaneContext{b, *stream, *arena, o, "", 0, 7}) {
      lane->setup(*ctx);
    }
    ~Instance() { stream->synchronize(); }  // its arena goes first: the work using it must be done
    const std::vector<double>& losses() const { return static_cast<const SmallTrainLane&>(*lane).losses(); }
  };
  Instance straight(*backend, options), first(*backend, options);
  for (int i = 0; i < 3; ++i) {  // mid-step: one microbatch of the second step accumulated
    straight.lane->step(*straight.ctx);
    first.lane->step(*first.ctx);
  }
  Instance resumed(*backend, options);
  resumed.lane->load(first.lane->save());
  for (int i = 0; i < 5; ++i) {
    straight.lane->step(*straight.ctx);
    resumed.lane->step(*resumed.ctx);
  }
  ASSERT_EQ(straight.losses().size(), 4u);
  ASSERT_EQ(resumed.losses().size(), 4u);
  for (std::size_t s = 0; s < 4; ++s)
    EXPECT_EQ(std::memcmp(&resumed.losses()[s], &straight.losses()[s], sizeof(double)), 0) << "step " << s + 1;
  EXPECT_NE(straight.losses().front(), straight.losses().back()) << "the lane does not train";
}

// The pagerank lane on the emulated device (pool arena, deferred stream) against the same lane on
// the CPU backend with precision = fp32 (the same op, run by the CPU backend): the same ranks bit
// for bit, the same iterations and residual; and a device run saved mid-iteration (ranks copied
// back) and resumed in a fresh instance ends with the same bits.
TEST_F(CudaEmulatedLanes, PagerankOnTheDeviceEqualsTheCpuBackendsFp32StepAndResumes) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto cuda = cuda_emu::make_emulated_cuda_backend();
  const auto cpu = make_cpu_backend(1);
  std::map<std::string, std::string> values = {{"generate", "rmat"}, {"scale", "9"}, {"edge_factor", "5"},
                                               {"slice_edges", "700"}, {"tolerance", "1e-7"}, {"top_k", "512"}};
  const LaneOptions on_device("pagerank", values, "test");
  values["precision"] = "fp32";
  const LaneOptions on_cpu("pagerank", values, "test");
  struct Instance {
    TempDir dir;
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Arena> arena;
    std::unique_ptr<LaneContext> ctx;
    std::unique_ptr<Lane> lane = make_pagerank_lane();
    Instance(Backend& b, const LaneOptions& o, MemoryKind kind)
        : stream(b.create_stream(StreamPriority::Low)), arena(b.create_arena("lane", kQuota, kind)),
          ctx(new LaneContext{b, *stream, *arena, o, dir.path().string(), 0, 7}) {
      lane->setup(*ctx);
    }
    ~Instance() { stream->synchronize(); }
    int run_to_end() {
      int steps = 0;
      for (; !lane->finished() && steps < 100000; ++steps) lane->step(*ctx);
      lane->teardown(*ctx);
      return steps;
    }
  };
  Instance device(*cuda, on_device, MemoryKind::DevicePool), host(*cpu, on_cpu, MemoryKind::Device);
  EXPECT_EQ(device.arena->kind(), MemoryKind::Device);  // the pool's
  device.run_to_end();
  host.run_to_end();
  const nlohmann::json got = device.lane->report(), want = host.lane->report();
  EXPECT_EQ(got.at("precision"), "fp32");
  EXPECT_TRUE(got.at("converged").get<bool>());
  EXPECT_EQ(got.at("iterations"), want.at("iterations"));
  const double got_residual = got.at("residual"), want_residual = want.at("residual");
  EXPECT_EQ(std::memcmp(&got_residual, &want_residual, sizeof(double)), 0);
  EXPECT_EQ(got.at("edges_processed"), want.at("edges_processed"));
  EXPECT_EQ(got.at("top"), want.at("top"));  // 512 vertices: every rank, bit for bit
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(device.dir.file("top_k.txt")), read(host.dir.file("top_k.txt")));
  EXPECT_FALSE(read(host.dir.file("top_k.txt")).empty());

  Instance first(*cuda, on_device, MemoryKind::DevicePool);
  for (int i = 0; i < 9; ++i) first.lane->step(*first.ctx);  // mid-iteration: an iteration is ~5 slices
  const std::string state = first.lane->save();
  Instance resumed(*cuda, on_device, MemoryKind::DevicePool);
  resumed.lane->load(state);
  resumed.run_to_end();
  EXPECT_EQ(resumed.lane->report().at("top"), want.at("top"));
  EXPECT_EQ(resumed.lane->report().at("edges_processed"), want.at("edges_processed"));
}

// Holds streams until released: a host function queued on a stream waits for release(), so
// nothing queued behind it completes before the test says so.
class StreamLatch {
 public:
  void hold(Stream& stream) {
    ASSERT_EQ(cudaLaunchHostFunc(cuda::cuda_stream(stream).handle(), &StreamLatch::wait, this), cudaSuccess);
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool released() {
    std::lock_guard lock(mu_);
    return released_;
  }

 private:
  static void wait(void* self) {
    auto* latch = static_cast<StreamLatch*>(self);
    std::unique_lock lock(latch->mu_);
    latch->cv_.wait(lock, [&] { return latch->released_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// A lane whose next step, once armed, first queues the latch on its stream: that step's value
// (smalltrain's loss, prefill's last logits) then cannot reach the host before the latch opens.
class LatchedLane : public Lane {
 public:
  LatchedLane(std::unique_ptr<Lane> lane, StreamLatch& latch) : lane_(std::move(lane)), latch_(latch) {}
  void arm() { armed_ = true; }
  std::string name() const override { return lane_->name(); }
  std::string work_unit() const override { return lane_->work_unit(); }
  bool runs_on_device() const override { return lane_->runs_on_device(); }
  void setup(LaneContext& ctx) override { lane_->setup(ctx); }
  double step(LaneContext& ctx) override {
    if (armed_.exchange(false)) latch_.hold(ctx.stream);
    return lane_->step(ctx);
  }
  bool finished() const override { return lane_->finished(); }
  std::string save() const override { return lane_->save(); }
  void load(const std::string& state) override { lane_->load(state); }
  nlohmann::json report() const override { return lane_->report(); }
  void teardown(LaneContext& ctx) override { lane_->teardown(ctx); }

 private:
  std::unique_ptr<Lane> lane_;
  StreamLatch& latch_;
  std::atomic<bool> armed_{false};  // set by the test, read on the lane's thread
};

// The gap scheduler runs on training's host thread: a device lane's steps are only enqueued
// there, even the ones that bring a value back to the host. With both lanes' streams held by a
// latch, fill() must return while their steps cannot have completed, and so must the next gap's
// fill(), which finds the lanes' backlog full and posts nothing; once released, every posted
// step is accounted, its results reported, and a checkpoint taken right after the release holds
// all of them.
TEST_F(CudaEmulatedLanes, DeviceStepsThatReturnValuesNeverHoldTrainingsThread) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto backend = cuda_emu::make_emulated_cuda_backend();
  const std::map<std::string, std::string> model = {
      {"layers", "1"}, {"d_model", "16"}, {"heads", "2"}, {"seq_len", "8"}, {"vocab_size", "32"}};
  auto smalltrain_options = model;
  smalltrain_options.insert({{"data", corpus_}, {"micro_batch", "1"}, {"accumulation", "1"}, {"steps", "1000"},
                             {"eval_batches", "0"}, {"seed", "11"}});
  // Every request there from the start and one chunk long: every step reads its logits.
  const std::string trace = corpus_dir_->file("requests.csv");
  test_support::write_file(trace, "0,4\n0,4\n0,4\n0,4\n0,4\n0,4\n0,4\n0,4\n");
  auto prefill_options = model;
  prefill_options.insert({{"chunk_tokens", "4"}, {"trace", trace}});
  StreamLatch latch;
  auto smalltrain = std::make_unique<LatchedLane>(make_smalltrain_lane(), latch);
  auto prefill = std::make_unique<LatchedLane>(make_prefill_lane(), latch);
  LatchedLane* const latched[] = {smalltrain.get(), prefill.get()};
  std::vector<LaneSpec> specs;
  specs.push_back({std::move(smalltrain), LaneOptions("smalltrain", smalltrain_options, "test")});
  specs.push_back({std::move(prefill), LaneOptions("prefill", prefill_options, "test")});
  GapSchedulerOptions options = emulated_lane_options(2, 1);  // every gap: two steps of each lane
  options.seed = 5;
  options.max_device_backlog_steps = 2;  // one gap's steps
  GapScheduler scheduler(*backend, std::move(specs), options, std::chrono::steady_clock::now(),
                         [](const std::string&) {});
  scheduler.calibrate();
  constexpr int kGap = 3;
  const auto arrived = [] { return true; };
  scheduler.fill(0, kGap, WaitKind::SyncWait, arrived);  // the profile iteration: measured only
  scheduler.end_iteration(0);
  const LanePlan plan = scheduler.plan();
  ASSERT_EQ(plan.count(kGap), 1u);
  ASSERT_EQ(plan.at(kGap).size(), 4u);

  for (LatchedLane* lane : latched) lane->arm();
  // Should fill() wait for a lane's stream, this thread opens the latch after a while, so the
  // test fails instead of hanging; a passing run never gets there.
  std::mutex mu;
  std::condition_variable cv;
  bool fill_returned = false, released_by_guard = false;
  std::thread guard([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return fill_returned; })) {
      released_by_guard = true;
      latch.release();
    }
  });
  scheduler.fill(1, kGap, WaitKind::SyncWait, arrived);
  scheduler.end_iteration(1);
  scheduler.fill(2, kGap, WaitKind::SyncWait, arrived);
  const bool held_when_fill_returned = !latch.released();
  {
    std::lock_guard lock(mu);
    fill_returned = true;
  }
  cv.notify_all();
  guard.join();
  EXPECT_TRUE(held_when_fill_returned) << "fill() waited for a lane's stream (released by the guard: "
                                       << released_by_guard << ")";
  latch.release();
  // A checkpoint right after the release: every step enqueued before it is in the state.
  const std::map<std::string, std::string> states = scheduler.save_lanes();
  scheduler.end_iteration(2);
  scheduler.teardown();

  const StageLaneSummary summary = scheduler.summary();
  for (const char* name : {"smalltrain", "prefill"}) {
    SCOPED_TRACE(name);
    const LaneStats& stats = summary.lanes.at(name);
    EXPECT_FALSE(stats.quarantined) << stats.quarantine_reason;
    EXPECT_EQ(stats.calibration_steps, 1);
    EXPECT_EQ(stats.steps, 3) << "one calibration step and the plan's two";
    EXPECT_GT(stats.lane_s, 0) << "event timing";
  }
  ASSERT_EQ(scheduler.gap_records().size(), 3u);
  EXPECT_EQ(scheduler.gap_records()[1].lane_steps, 4);
  EXPECT_EQ(scheduler.gap_records()[2].lane_steps, 0) << "the backlog was full";
  long skipped = 0;
  for (const char* name : {"smalltrain", "prefill"}) skipped += summary.lanes.at(name).backlog_skipped_steps;
  EXPECT_GT(skipped, 0) << "the summary says that gaps skipped steps";
  // The lanes' results: smalltrain's losses (one optimizer step per microbatch), prefill's tokens.
  const nlohmann::json& smalltrain_report = summary.lanes.at("smalltrain").report;
  EXPECT_EQ(smalltrain_report.at("steps"), 3);
  EXPECT_TRUE(smalltrain_report.contains("last_loss"));
  const nlohmann::json& prefill_report = summary.lanes.at("prefill").report;
  EXPECT_EQ(prefill_report.at("requests_done"), 3) << "one request per step";
  EXPECT_EQ(prefill_report.at("prompt_tokens"), 12);
  EXPECT_TRUE(prefill_report.contains("ttft_ms_p50"));

  // The checkpoint: a fresh smalltrain loaded from it has all three losses.
  const auto stream = backend->create_stream(StreamPriority::Low);
  const auto arena = backend->create_arena("lane", kQuota, MemoryKind::DevicePool);
  const LaneOptions restore_options("smalltrain", smalltrain_options, "test");
  LaneContext ctx{*backend, *stream, *arena, restore_options, "", 0, 5};
  SmallTrainLane restored;
  restored.setup(ctx);
  restored.load(states.at("smalltrain"));
  stream->synchronize();
  EXPECT_EQ(restored.losses().size(), 3u);
  for (double loss : restored.losses()) EXPECT_TRUE(std::isfinite(loss));
}

// A device lane finished after `total` steps of a little work on its stream.
class FiniteLane : public Lane {
 public:
  explicit FiniteLane(int total) : total_(total) {}
  std::string name() const override { return "finite"; }
  std::string work_unit() const override { return "elements"; }
  bool runs_on_device() const override { return true; }
  void setup(LaneContext& ctx) override { x_ = ctx.arena.allocate_n<float>(kElements, "finite.x"); }
  double step(LaneContext& ctx) override {
    ctx.backend.scale(x_, 0.5f, kElements, ctx.stream);
    ++done_;
    return kElements;
  }
  bool finished() const override { return done_ >= total_; }
  std::string save() const override { return std::to_string(done_); }
  void load(const std::string& state) override { done_ = std::stoi(state); }
  nlohmann::json report() const override { return {{"steps", done_}}; }

 private:
  static constexpr std::size_t kElements = 256;
  int total_;
  int done_ = 0;
  float* x_ = nullptr;
};

// The scheduler learns that a device lane finished only when its steps come back, so a gap may
// post steps past the end: they do not run, and neither the gap nor the lane counts them.
TEST_F(CudaEmulatedLanes, DeviceStepsPostedPastALanesEndDoNotRun) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto backend = cuda_emu::make_emulated_cuda_backend();
  std::vector<LaneSpec> specs;
  specs.push_back({std::make_unique<FiniteLane>(3), {}});
  const GapSchedulerOptions options = emulated_lane_options(1, 1);
  GapScheduler scheduler(*backend, std::move(specs), options, std::chrono::steady_clock::now(),
                         [](const std::string&) {});
  scheduler.calibrate();
  const auto arrived = [] { return true; };
  scheduler.fill(0, 1, WaitKind::SyncWait, arrived);
  scheduler.end_iteration(0);
  ASSERT_EQ(scheduler.plan().at(1).size(), 4u);
  scheduler.fill(1, 1, WaitKind::SyncWait, arrived);  // posts 4: two run, two come after the end
  scheduler.end_iteration(1);
  scheduler.fill(2, 1, WaitKind::SyncWait, arrived);  // by now known finished, or posted and not run
  scheduler.teardown();
  const StageLaneSummary summary = scheduler.summary();
  const LaneStats& stats = summary.lanes.at("finite");
  EXPECT_FALSE(stats.quarantined) << stats.quarantine_reason;
  EXPECT_TRUE(stats.finished);
  EXPECT_EQ(stats.steps, 3);
  EXPECT_EQ(stats.report.at("steps"), 3);
  ASSERT_EQ(scheduler.gap_records().size(), 3u);
  EXPECT_EQ(scheduler.gap_records()[1].lane_steps, 2);
  EXPECT_EQ(scheduler.gap_records()[2].lane_steps, 0);
  EXPECT_EQ(scheduler.step_records().size(), 3u);
}

}  // namespace
}  // namespace pipelane::cuda_test
