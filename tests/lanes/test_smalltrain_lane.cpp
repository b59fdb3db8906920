// smalltrain: a second GPT trained with pipelane's own model code on a lane arena.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "datasets/token_store.h"
#include "datasets/window_sampler.h"
#include "lanes/builtin/builtin_lanes.h"
#include "lanes/builtin/smalltrain_lane.h"
#include "model/adamw.h"
#include "model/gpt_model.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/datasets/test_files.h"

namespace pipelane {
namespace {

using test_support::TempDir;

// A tiny corpus with structure a 2-layer model picks up in a few dozen steps: documents that
// count upwards modulo 32 from a random start, with an occasional random token.
std::string write_corpus(const TempDir& dir, bool with_valid = true, std::uint32_t vocab = 32) {
  auto make = [&](std::size_t docs, std::uint64_t seed) {
    TokenSplit s;
    s.doc_offsets.push_back(0);
    std::uint64_t st = seed;
    auto rnd = [&] {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<std::uint32_t>(st >> 33);
    };
    for (std::size_t d = 0; d < docs; ++d) {
      std::uint32_t t = rnd() % 32;
      const std::size_t len = 40 + rnd() % 40;
      for (std::size_t i = 0; i < len; ++i) {
        s.tokens.push_back(rnd() % 10 == 0 ? rnd() % vocab : t);
        t = (t + 1) % 32;
      }
      s.doc_offsets.push_back(s.tokens.size());
    }
    return s;
  };
  TokenStoreMeta meta;
  meta.tokenizer = "test";
  meta.vocab_size = vocab;
  const std::string path = dir.file("corpus.h5");
  write_token_store(path, meta, make(80, 1), with_valid ? make(10, 2) : TokenSplit{{}, {0}});
  return path;
}

struct Harness {
  std::unique_ptr<Backend> device = make_cpu_backend(1);
  std::unique_ptr<Stream> stream = device->create_stream(StreamPriority::Low);
  Arena arena;
  LaneOptions options;
  TempDir out;
  LaneContext ctx;
  Harness(std::map<std::string, std::string> opts, std::size_t arena_bytes = 16u << 20)
      : arena("lane.smalltrain", arena_bytes),
        options("smalltrain", std::move(opts), "test.ini"),
        ctx{*device, *stream, arena, options, out.path().string(), 0, 7} {}
};

std::map<std::string, std::string> tiny_options(const std::string& data) {
  return {{"data", data},        {"layers", "2"},      {"d_model", "32"},  {"heads", "2"},
          {"seq_len", "16"},     {"vocab_size", "64"}, {"micro_batch", "4"}, {"lr", "3e-3"},
          {"accumulation", "1"}, {"seed", "11"}};
}

void run_to_end(SmallTrainLane& lane, Harness& h, int max_steps = 100000) {
  for (int i = 0; i < max_steps && !lane.finished(); ++i) lane.step(h.ctx);
  ASSERT_TRUE(lane.finished());
}

TEST(SmallTrainLane, RegisteredAsBuiltin) {
  const auto f = builtin_lane_factories();
  ASSERT_TRUE(f.count("smalltrain"));
  ASSERT_TRUE(f.count("prefill"));
  auto lane = f.at("smalltrain")();
  EXPECT_EQ(lane->name(), "smalltrain");
  EXPECT_EQ(lane->work_unit(), "tokens");
}

TEST(SmallTrainLane, LearnsWritesMetricsAndValidates) {
  TempDir data;
  auto opts = tiny_options(write_corpus(data));
  opts["steps"] = "60";
  Harness h(opts);
  SmallTrainLane lane;
  lane.setup(h.ctx);
  double tokens = 0;
  int steps = 0;
  while (!lane.finished()) {
    tokens += lane.step(h.ctx);
    ++steps;
  }
  EXPECT_EQ(steps, 60 + 4);  // 60 microbatches, then eval_batches = 4
  EXPECT_EQ(tokens, 64.0 * 4 * 16);
  ASSERT_EQ(lane.losses().size(), 60u);
  const double first = lane.losses().front(), last = lane.losses().back();
  EXPECT_NEAR(first, std::log(64.0), 0.5);  // a fresh model is near uniform
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
  std::cout << "first loss " << first << ", last loss " << last << ", val loss "
            << lane.val_loss().value_or(-1) << "\n";
  ASSERT_TRUE(lane.val_loss().has_value());
  EXPECT_LT(*lane.val_loss(), first);
  EXPECT_EQ(lane.step(h.ctx), 0.0);  // finished: no more work

  const nlohmann::json r = lane.report();
  EXPECT_EQ(r["steps"], 60);
  EXPECT_EQ(r["tokens"], 64 * 4 * 16);
  EXPECT_EQ(r["first_loss"].get<double>(), first);
  EXPECT_EQ(r["last_loss"].get<double>(), last);
  EXPECT_EQ(r["val_loss"].get<double>(), *lane.val_loss());

  std::ifstream in(h.out.file("metrics.jsonl"));
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 61u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_EQ(lines[0]["loss"].get<double>(), first);
  EXPECT_EQ(lines[59]["loss"].get<double>(), last);
  EXPECT_EQ(lines[60]["val_loss"].get<double>(), *lane.val_loss());
  // Everything came from the arena.
  EXPECT_EQ(h.arena.used(), lane.arena_bytes_needed());
}

// The lane is exactly GptStage + AdamW + WindowSampler: a direct loop gives the same bits.
TEST(SmallTrainLane, SameLossesAsDirectLoopAndAcrossRuns) {
  TempDir data;
  const std::string path = write_corpus(data);
  auto opts = tiny_options(path);
  opts["steps"] = "6";
  opts["accumulation"] = "2";
  opts["eval_batches"] = "0";
  std::vector<double> runs[2];
  for (auto& losses : runs) {
    Harness h(opts);
    SmallTrainLane lane;
    lane.setup(h.ctx);
    run_to_end(lane, h);
    losses = lane.losses();
    EXPECT_FALSE(lane.val_loss().has_value());
  }
  ASSERT_EQ(runs[0].size(), 6u);
  EXPECT_EQ(runs[0], runs[1]);

  // Direct loop, on one thread like the lane's backend (sgemm rounds differently per thread count).
  const std::unique_ptr<Backend> one_thread = make_cpu_backend(1);
  const std::unique_ptr<Stream> one_stream = one_thread->create_stream(StreamPriority::Low);
  GptConfig cfg;
  cfg.layers = 2;
  cfg.d_model = 32;
  cfg.heads = 2;
  cfg.max_seq_len = 16;
  cfg.vocab_size = 64;
  const int B = 4, T = 16, accum = 2;
  GptStage stage(cfg, StageRange::whole(cfg), *one_thread, *one_stream);
  Arena arena("direct", 16u << 20);
  const std::size_t P = stage.layout().total_floats();
  float* params = arena.allocate_n<float>(P);
  float* grads = arena.allocate_n<float>(P);
  float* m = arena.allocate_n<float>(P);
  float* v = arena.allocate_n<float>(P);
  auto acts = stage.allocate_activations(arena, B, T);
  auto scratch = stage.allocate_scratch(arena, B, T);
  GptStage::init_parameters(stage.layout(), params, 11);
  const TokenStore store = TokenStore::open(path);
  WindowSampler sampler(store.train(), T, 11);
  std::vector<std::int32_t> in(B * T), tg(B * T);
  std::vector<double> direct;
  for (int step = 0; step < 6; ++step) {
    std::memset(grads, 0, P * sizeof(float));
    double sum = 0;
    for (int k = 0; k < accum; ++k) {
      sampler.next_batch(B, in.data(), tg.data());
      sum += stage.forward(params, grads, acts, scratch, in.data(), nullptr, tg.data(),
                           1.0f / (B * T * accum));
      stage.backward(params, grads, acts, scratch, in.data(), nullptr, nullptr);
    }
    const double norm = std::sqrt(grad_sum_squares(stage.layout(), grads, *one_thread, *one_stream));
    adamw_step(stage.layout(), params, grads, m, v, AdamWConfig{}, 3e-3f, step + 1,
               clip_scale(norm, 1.0f), *one_thread, *one_stream);
    direct.push_back(sum / (B * T * accum));
  }
  EXPECT_EQ(runs[0], direct);
}

// save() mid-accumulation, load() into a fresh lane: the same losses as never stopping.
TEST(SmallTrainLane, SaveLoadContinuesBitExactly) {
  TempDir data;
  auto opts = tiny_options(write_corpus(data));
  opts["steps"] = "6";
  opts["accumulation"] = "2";
  opts["eval_batches"] = "2";

  Harness ref_h(opts);
  SmallTrainLane ref;
  ref.setup(ref_h.ctx);
  run_to_end(ref, ref_h);

  std::string state;
  {
    Harness h(opts);
    SmallTrainLane first;
    first.setup(h.ctx);
    for (int i = 0; i < 5; ++i) first.step(h.ctx);  // 2 optimizer steps + half of the third
    state = first.save();
    EXPECT_EQ(first.losses().size(), 2u);
  }
  Harness h(opts);
  SmallTrainLane resumed;
  resumed.setup(h.ctx);
  resumed.load(state);
  EXPECT_EQ(resumed.report()["steps"], 2);
  run_to_end(resumed, h);
  EXPECT_EQ(resumed.losses(), ref.losses());
  ASSERT_TRUE(resumed.val_loss().has_value());
  EXPECT_EQ(*resumed.val_loss(), *ref.val_loss());
  EXPECT_EQ(resumed.report()["tokens"], ref.report()["tokens"]);
  EXPECT_EQ(std::memcmp(resumed.parameters(), ref.parameters(),
                        ref.layout().total_floats() * sizeof(float)),
            0);
  // A state made with other options is refused.
  auto other = opts;
  other["micro_batch"] = "2";
  Harness h2(other);
  SmallTrainLane wrong;
  wrong.setup(h2.ctx);
  EXPECT_THROW(wrong.load(state), LaneError);
  EXPECT_THROW(wrong.load("garbage"), LaneError);
}

// The defaults (data/jargon.h5, the 2-layer d_model 64 model) when the repository's data is here.
TEST(SmallTrainLane, DefaultsRunOnRepositoryData) {
  if (!std::ifstream("data/jargon.h5")) GTEST_SKIP() << "data/jargon.h5 not present";
  Harness h({{"steps", "3"}, {"eval_batches", "1"}});
  SmallTrainLane lane;
  lane.setup(h.ctx);
  EXPECT_EQ(lane.settings().data, "data/jargon.h5");
  EXPECT_EQ(lane.settings().seed, 7u);  // ctx.seed + rank
  run_to_end(lane, h);
  EXPECT_EQ(lane.losses().size(), 3u);
  EXPECT_NEAR(lane.losses()[0], std::log(256.0), 0.5);
  EXPECT_TRUE(lane.val_loss().has_value());
  std::cout << "smalltrain defaults: " << lane.report().dump() << "\n";
}

TEST(SmallTrainLane, QuotaTooSmallFailsSetup) {
  TempDir data;
  Harness h(tiny_options(write_corpus(data)), 64 << 10);
  SmallTrainLane lane;
  try {
    lane.setup(h.ctx);
    FAIL() << "expected LaneError";
  } catch (const LaneError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes of arena"), std::string::npos) << e.what();
  }
  EXPECT_EQ(h.arena.used(), 0u);
}

TEST(SmallTrainLane, BadOptionsAndDataAreLaneErrors) {
  TempDir data;
  const std::string path = write_corpus(data);
  auto expect_error = [&](std::map<std::string, std::string> o, const std::string& needle) {
    Harness h(std::move(o));
    SmallTrainLane lane;
    try {
      lane.setup(h.ctx);
      ADD_FAILURE() << "expected LaneError containing " << needle;
    } catch (const LaneError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto o = tiny_options(path);
  o["colour"] = "blue";
  expect_error(o, "colour");
  o = tiny_options(path);
  o["heads"] = "3";
  expect_error(o, "heads");
  o = tiny_options(path);
  o["micro_batch"] = "0";
  expect_error(o, "micro_batch");
  o = tiny_options(data.file("missing.h5"));
  expect_error(o, "missing.h5");
  o = tiny_options(path);
  o["vocab_size"] = "16";  // the data has 32
  expect_error(o, "vocab_size");
}

}  // namespace
}  // namespace pipelane
