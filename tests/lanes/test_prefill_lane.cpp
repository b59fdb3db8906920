// prefill: chunked prefill with a KV cache on a frozen GPT, a request queue, TTFT statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "lanes/builtin/prefill_lane.h"
#include "model/gpt_model.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/datasets/test_files.h"

namespace pipelane {
namespace {

using test_support::TempDir;
using test_support::write_file;

struct Harness {
  std::unique_ptr<Backend> device = make_cpu_backend(1);
  std::unique_ptr<Stream> stream = device->create_stream(StreamPriority::Low);
  Arena arena;
  LaneOptions options;
  TempDir out;
  LaneContext ctx;
  explicit Harness(std::map<std::string, std::string> opts, std::size_t arena_bytes = 8u << 20)
      : arena("lane.prefill", arena_bytes),
        options("prefill", std::move(opts), "test.ini"),
        ctx{*device, *stream, arena, options, out.path().string(), 0, 3} {}
};

std::map<std::string, std::string> model_options() {
  return {{"layers", "2"},  {"d_model", "32"},    {"heads", "4"},
          {"seq_len", "24"}, {"vocab_size", "50"}, {"seed", "5"}};
}

// Full forward of the whole prompt through GptStage (the reference): logits of the last position.
std::vector<float> reference_last_logits(const PrefillLane& lane, const std::vector<std::int32_t>& prompt) {
  const GptConfig cfg = lane.layout().config();
  const std::unique_ptr<Backend> backend = make_cpu_backend(1);
  const std::unique_ptr<Stream> stream = backend->create_stream(StreamPriority::High);
  GptStage stage(cfg, StageRange::whole(cfg), *backend, *stream);
  const int T = static_cast<int>(prompt.size());
  Arena arena("reference", 8u << 20);
  auto acts = stage.allocate_activations(arena, 1, T);
  auto scratch = stage.allocate_scratch(arena, 1, T);
  std::vector<std::int32_t> targets(T, 0);
  const float* params = const_cast<PrefillLane&>(lane).parameters();
  stage.forward(params, nullptr, acts, scratch, prompt.data(), nullptr, targets.data(), 1.f);
  const int Vp = cfg.padded_vocab();
  std::vector<float> logits(static_cast<std::size_t>(T) * Vp);
  stage.logits(params, acts, logits.data());
  return {logits.end() - Vp, logits.end()};
}

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

TEST(PrefillLane, FirstTokenMatchesFullForward) {
  TempDir dir;
  const std::string trace = dir.file("trace.csv");
  write_file(trace, "# arrival_ms,prompt_tokens\n0,1\n0,7\n0,24  # a full-length prompt\n0,13\n");
  for (const char* chunk : {"5", "1", "64"}) {
    auto opts = model_options();
    opts["trace"] = trace;
    opts["chunk_tokens"] = chunk;
    Harness h(opts);
    PrefillLane lane;
    lane.setup(h.ctx);
    EXPECT_EQ(h.arena.used(), PrefillLane::arena_bytes_needed(lane.settings()));
    const int V = lane.settings().model.vocab_size, Vp = lane.settings().model.padded_vocab();
    std::size_t checked = 0;
    double tokens = 0;
    while (!lane.finished()) {
      tokens += lane.step(h.ctx);
      if (lane.results().size() == checked) continue;
      const PrefillResult& r = lane.results().back();
      std::vector<std::int32_t> prompt(r.prompt_tokens);
      prefill_prompt_tokens(5, r.id, r.prompt_tokens, V, prompt.data());
      const std::vector<float> ref = reference_last_logits(lane, prompt);
      EXPECT_EQ(r.first_token, argmax(ref.data(), V)) << "request " << r.id << " chunk " << chunk;
      for (int v = 0; v < V; ++v)
        ASSERT_NEAR(lane.last_logits()[v], ref[v], 1e-4f * (1.f + std::fabs(ref[v])))
            << "request " << r.id << " vocab " << v << " chunk " << chunk;
      for (int v = V; v < Vp; ++v) EXPECT_EQ(lane.last_logits()[v], 0.f);  // padding rows
      ++checked;
    }
    EXPECT_EQ(checked, 4u);
    EXPECT_EQ(tokens, 1 + 7 + 24 + 13);
  }
}

TEST(PrefillLane, TtftAndQueueWithInjectedClock) {
  TempDir dir;
  const std::string trace = dir.file("trace.csv");
  // Out of order on purpose: served by arrival.
  write_file(trace, "5,10\n0,10\n\n# late one\n100,20\n");
  auto opts = model_options();
  opts["trace"] = trace;
  opts["chunk_tokens"] = "10";
  Harness h(opts);
  PrefillLane lane;
  double now = 1000;  // any origin
  lane.set_clock([&] { return now; });
  lane.setup(h.ctx);
  ASSERT_EQ(lane.requests().size(), 3u);
  EXPECT_EQ(lane.requests()[0].id, 1);  // the "0,10" line
  EXPECT_EQ(lane.queue_length(), 1u);
  EXPECT_EQ(lane.step(h.ctx), 10.0);   // request 1 (arrived at 0), done at 0
  EXPECT_EQ(lane.step(h.ctx), 0.0);    // request 0 arrives at 5: nothing queued yet
  EXPECT_EQ(lane.queue_length(), 0u);
  now = 1020;
  EXPECT_EQ(lane.queue_length(), 1u);
  EXPECT_EQ(lane.step(h.ctx), 10.0);   // request 0: ttft 15
  now = 1120;
  EXPECT_EQ(lane.step(h.ctx), 10.0);   // first chunk of the late one
  EXPECT_FALSE(lane.finished());
  now = 1150;
  EXPECT_EQ(lane.queue_length(), 1u);
  EXPECT_EQ(lane.step(h.ctx), 10.0);   // done: ttft 50
  EXPECT_TRUE(lane.finished());
  EXPECT_EQ(lane.step(h.ctx), 0.0);
  ASSERT_EQ(lane.results().size(), 3u);
  EXPECT_EQ(lane.results()[0].ttft_ms(), 0.0);
  EXPECT_EQ(lane.results()[1].ttft_ms(), 15.0);
  EXPECT_EQ(lane.results()[2].ttft_ms(), 50.0);
  now = 5000;  // after the end: wall rate stays over start..last completion
  const nlohmann::json r = lane.report();
  EXPECT_EQ(r["requests_done"], 3);
  EXPECT_EQ(r["requests_total"], 3);
  EXPECT_EQ(r["queue_length"], 0);
  EXPECT_EQ(r["prompt_tokens"], 40);
  EXPECT_EQ(r["ttft_ms_p50"].get<double>(), 15.0);
  EXPECT_EQ(r["ttft_ms_p99"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(r["requests_per_s_wall"].get<double>(), 3 / 0.150);
  EXPECT_TRUE(r["requests_per_s_active"].is_null());  // the fake clock never moved inside a step

  // requests.jsonl: one line per completed request.
  std::ifstream in(h.out.file("requests.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  EXPECT_EQ(n, 3);
}

TEST(PrefillLane, PercentileIsNearestRank) {
  EXPECT_EQ(percentile_nearest_rank({}, 50), 0.0);
  EXPECT_EQ(percentile_nearest_rank({3, 1, 2}, 50), 2.0);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(percentile_nearest_rank(v, 50), 50.0);
  EXPECT_EQ(percentile_nearest_rank(v, 99), 99.0);
  EXPECT_EQ(percentile_nearest_rank(v, 100), 100.0);
}

TEST(PrefillLane, MalformedTraceNamesFileAndLine) {
  TempDir dir;
  auto expect_error = [&](const std::string& body, const std::string& needle) {
    const std::string trace = dir.file("bad.csv");
    write_file(trace, body);
    auto opts = model_options();
    opts["trace"] = trace;
    Harness h(opts);
    PrefillLane lane;
    try {
      lane.setup(h.ctx);
      ADD_FAILURE() << "expected LaneError for " << body;
    } catch (const LaneError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("0,4\n# ok\nten,4\n", dir.file("bad.csv") + ":3:");
  expect_error("0,4\n1,4,5\n", dir.file("bad.csv") + ":2:");
  expect_error("0,4\n1\n", dir.file("bad.csv") + ":2:");
  expect_error("0,4x\n", dir.file("bad.csv") + ":1:");
  expect_error("-1,4\n", dir.file("bad.csv") + ":1: arrival_ms");
  expect_error("0,25\n", dir.file("bad.csv") + ":1: prompt_tokens");  // seq_len is 24
  expect_error("0,0\n", dir.file("bad.csv") + ":1: prompt_tokens");
  expect_error("# nothing\n", "holds no request");

  auto opts = model_options();
  opts["trace"] = dir.file("absent.csv");
  Harness h(opts);
  PrefillLane lane;
  EXPECT_THROW(lane.setup(h.ctx), LaneError);
}

TEST(PrefillLane, OptionsAreValidated) {
  auto expect_error = [&](std::map<std::string, std::string> o, const std::string& needle,
                          std::size_t arena = 8u << 20) {
    Harness h(std::move(o), arena);
    PrefillLane lane;
    try {
      lane.setup(h.ctx);
      ADD_FAILURE() << "expected LaneError containing " << needle;
    } catch (const LaneError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto o = model_options();
  o["speed"] = "fast";
  expect_error(o, "speed");
  o = model_options();
  o["trace"] = "x.csv";
  o["rate_per_s"] = "5";
  expect_error(o, "rate_per_s");
  o = model_options();
  o["prompt_max"] = "25";  // > seq_len
  expect_error(o, "prompt_max");
  o = model_options();
  o["prompt_min"] = "10";
  o["prompt_max"] = "9";
  expect_error(o, "prompt_max");
  expect_error(model_options(), "bytes of arena", 16 << 10);
}

TEST(PrefillLane, PoissonGeneratorIsSeededAndRuns) {
  const auto a = poisson_prefill_requests(200, 50, 3, 9, 42);
  const auto b = poisson_prefill_requests(200, 50, 3, 9, 42);
  const auto c = poisson_prefill_requests(200, 50, 3, 9, 43);
  ASSERT_EQ(a.size(), 50u);
  double prev = 0, lengths_differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_ms, b[i].arrival_ms);
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    EXPECT_GT(a[i].arrival_ms, prev);
    prev = a[i].arrival_ms;
    EXPECT_GE(a[i].prompt_tokens, 3);
    EXPECT_LE(a[i].prompt_tokens, 9);
    lengths_differ += a[i].prompt_tokens != c[i].prompt_tokens;
  }
  EXPECT_GT(lengths_differ, 0);
  EXPECT_NEAR(prev, 50 * 1000.0 / 200, 125.0);  // mean gap 5 ms

  // The lane on the steady clock: 10 requests at 2000/s arrive within a few ms.
  auto opts = model_options();
  opts["rate_per_s"] = "2000";
  opts["requests"] = "10";
  opts["prompt_min"] = "4";
  opts["prompt_max"] = "12";
  opts["chunk_tokens"] = "8";
  Harness h(opts);
  PrefillLane lane;
  lane.setup(h.ctx);
  for (int i = 0; i < 1000000 && !lane.finished(); ++i) lane.step(h.ctx);
  ASSERT_TRUE(lane.finished());
  const nlohmann::json r = lane.report();
  EXPECT_EQ(r["requests_done"], 10);
  EXPECT_GE(r["ttft_ms_p99"].get<double>(), r["ttft_ms_p50"].get<double>());
  EXPECT_GE(r["ttft_ms_p50"].get<double>(), 0.0);
  EXPECT_LT(r["ttft_ms_p99"].get<double>(), 10000.0);
  EXPECT_GT(r["requests_per_s_wall"].get<double>(), 0.0);
  EXPECT_GT(r["requests_per_s_active"].get<double>(), 0.0);
}

TEST(PrefillLane, SaveLoadKeepsQueuePosition) {
  TempDir dir;
  const std::string trace = dir.file("trace.csv");
  write_file(trace, "0,10\n0,10\n10,6\n40,9\n");
  auto opts = model_options();
  opts["trace"] = trace;
  opts["chunk_tokens"] = "4";

  // Reference: straight through.
  std::vector<std::int32_t> ref_tokens;
  {
    Harness h(opts);
    PrefillLane lane;
    double now = 0;
    lane.set_clock([&] { return now; });
    lane.setup(h.ctx);
    now = 50;
    while (!lane.finished()) lane.step(h.ctx);
    for (const auto& r : lane.results()) ref_tokens.push_back(r.first_token);
  }
  std::string state;
  {
    Harness h(opts);
    PrefillLane lane;
    double now = 0;
    lane.set_clock([&] { return now; });
    lane.setup(h.ctx);
    for (int i = 0; i < 3; ++i) lane.step(h.ctx);  // request 0 done (3 chunks)
    now = 20;
    lane.step(h.ctx);  // first chunk of request 1
    ASSERT_EQ(lane.results().size(), 1u);
    state = lane.save();
  }
  Harness h(opts);
  PrefillLane lane;
  double now = 7000;  // another process, another clock origin
  lane.set_clock([&] { return now; });
  lane.setup(h.ctx);
  lane.load(state);
  EXPECT_EQ(lane.results().size(), 1u);
  EXPECT_EQ(lane.report()["requests_done"], 1);
  EXPECT_EQ(lane.queue_length(), 2u);  // at t = 20: requests 1 and 2 have arrived
  EXPECT_EQ(lane.step(h.ctx), 4.0);    // request 1 starts over from its first chunk
  EXPECT_EQ(lane.step(h.ctx), 4.0);
  EXPECT_EQ(lane.step(h.ctx), 2.0);
  ASSERT_EQ(lane.results().size(), 2u);
  now = 7030;                          // t = 50
  while (!lane.finished()) lane.step(h.ctx);
  std::vector<std::int32_t> tokens;
  for (const auto& r : lane.results()) tokens.push_back(r.first_token);
  EXPECT_EQ(tokens, ref_tokens);
  EXPECT_EQ(lane.results()[0].done_ms, 0.0);
  EXPECT_EQ(lane.results()[1].done_ms, 20.0);  // resumed at the saved lane time
  EXPECT_EQ(lane.results()[3].ttft_ms(), 10.0);

  auto other = opts;
  other["seed"] = "6";
  Harness h2(other);
  PrefillLane wrong;
  wrong.setup(h2.ctx);
  EXPECT_THROW(wrong.load(state), LaneError);
  EXPECT_THROW(wrong.load("nope"), LaneError);
}

}  // namespace
}  // namespace pipelane
