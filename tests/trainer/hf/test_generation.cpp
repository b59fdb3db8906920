// Inference: the KV-cache attention op (Backend::attention_forward_kv), the incremental decoder
// (model/gpt_decoder.h) against the training forward, and sampling (trainer/hf/text_generation.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/gpt_decoder.h"
#include "model/gpt_model.h"
#include "runtime/arena.h"
#include "tests/support/cpu_backend_fixture.h"
#include "trainer/hf/text_generation.h"

namespace pipelane {
namespace {

std::vector<float> random_vector(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<float>((seed >> 40) % 2001) / 1000.0f - 1.0f;
  }
  return v;
}

// Causal attention in double over a fused qkv [T, 3C]: the reference.
std::vector<double> reference_attention(const std::vector<float>& qkv, int T, int C, int NH) {
  const int hs = C / NH;
  std::vector<double> out(static_cast<std::size_t>(T) * C, 0.0);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      std::vector<double> w(i + 1);
      double top = -1e300, sum = 0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int d = 0; d < hs; ++d) dot += double(qkv[i * 3 * C + h * hs + d]) * qkv[j * 3 * C + C + h * hs + d];
        w[j] = dot / std::sqrt(double(hs));
        top = std::max(top, w[j]);
      }
      for (int j = 0; j <= i; ++j) sum += (w[j] = std::exp(w[j] - top));
      for (int j = 0; j <= i; ++j)
        for (int d = 0; d < hs; ++d) out[i * C + h * hs + d] += w[j] / sum * qkv[j * 3 * C + 2 * C + h * hs + d];
    }
  return out;
}

TEST(AttentionKv, MatchesReferenceAndIgnoresChunking) {
  Backend& b = testing::cpu_backend();
  Stream& st = testing::cpu_stream();
  const int T = 13, C = 24, NH = 3;
  const std::vector<float> qkv = random_vector(static_cast<std::size_t>(T) * 3 * C, 7);
  std::vector<float> scores(T * NH * T);
  // The op appends each call's K and V to the cache: a fresh cache for each way of chunking.
  const auto run = [&](int chunk) {
    std::vector<float> out(T * C), K(T * C), V(T * C);
    for (int p0 = 0; p0 < T; p0 += chunk) {
      const int n = std::min(chunk, T - p0);
      b.attention_forward_kv(out.data() + p0 * C, scores.data(), qkv.data() + p0 * 3 * C, K.data(), V.data(), p0,
                             n, C, NH, st);
    }
    return out;
  };
  const std::vector<float> all = run(T);
  const std::vector<double> ref = reference_attention(qkv, T, C, NH);
  for (int i = 0; i < T * C; ++i) EXPECT_NEAR(all[i], ref[i], 1e-5) << i;  // values ~1: float rounding
  // One position at a time (decoding) and in uneven chunks (prefill): the same bits.
  EXPECT_EQ(run(1), all);
  EXPECT_EQ(run(5), all);
}

struct TinyModel {
  GptConfig cfg;
  ParamLayout layout;
  std::vector<float> params;
  TinyModel() : cfg(make()), layout(cfg, StageRange::whole(cfg)), params(layout.total_floats()) {
    GptStage::init_parameters(layout, params.data(), 42);
  }
  static GptConfig make() {
    GptConfig c;
    c.layers = 2;
    c.d_model = 32;
    c.heads = 4;
    c.max_seq_len = 16;
    c.vocab_size = 100;
    return c;
  }
};

TEST(GptDecoder, LastLogitsMatchTheTrainingForward) {
  TinyModel m;
  const int T = 11;
  std::vector<std::int32_t> tokens(T), targets(T, 0);
  for (int t = 0; t < T; ++t) tokens[t] = (t * 37 + 5) % m.cfg.vocab_size;
  Backend& backend = testing::cpu_backend();
  Stream& stream = testing::cpu_stream();
  GptStage stage(m.cfg, StageRange::whole(m.cfg), backend, stream);
  Arena arena("test", stage.activation_bytes(1, T) + stage.scratch_bytes(1, T) + (1 << 16));
  MicrobatchActivations acts = stage.allocate_activations(arena, 1, T);
  StageScratch scratch = stage.allocate_scratch(arena, 1, T);
  stage.forward(m.params.data(), nullptr, acts, scratch, tokens.data(), nullptr, targets.data(), 1.0f);
  const int Vp = m.cfg.padded_vocab();
  std::vector<float> full(static_cast<std::size_t>(T) * Vp);
  stage.logits(m.params.data(), acts, full.data());

  GptDecoder whole(m.layout, m.params.data(), backend, stream);
  const float* a = whole.append(tokens.data(), T);
  std::vector<float> prompt_logits(a, a + Vp);
  GptDecoder stepwise(m.layout, m.params.data(), backend, stream, 4);
  const float* b = nullptr;
  for (int t = 0; t < T; ++t) b = stepwise.append(&tokens[t], 1);
  // Decoding one token at a time agrees with decoding the prompt at once up to sgemm's rounding,
  // which differs between a 1-row and an 11-row product (attention itself is bit-exact; see above).
  for (int v = 0; v < m.cfg.vocab_size; ++v) EXPECT_NEAR(b[v], prompt_logits[v], 1e-5) << v;
  // The training forward's softmax uses a polynomial exp (relative error < 2e-7, runtime/cpu/
  // fast_math.h) where the decoder uses std::exp; through two layers that stays far below 1e-4.
  for (int v = 0; v < m.cfg.vocab_size; ++v) EXPECT_NEAR(prompt_logits[v], full[(T - 1) * Vp + v], 1e-4) << v;
  EXPECT_EQ(whole.position(), T);
  EXPECT_THROW(whole.append(tokens.data(), T), std::invalid_argument);  // past the context of 16
  const std::int32_t bad = m.cfg.vocab_size;
  EXPECT_THROW(stepwise.append(&bad, 1), std::invalid_argument);
}

TEST(TokenSampler, GreedyCutsAndSeeds) {
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -3.0f, 1.0f};
  TokenSampler greedy({0.0, 0, 1.0}, 1);
  EXPECT_EQ(greedy.sample(logits.data(), 5), 1);
  TokenSampler top1({1.0, 1, 1.0}, 2);
  TokenSampler nucleus({1.0, 0, 0.01}, 3);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(top1.sample(logits.data(), 5), 1);
    EXPECT_EQ(nucleus.sample(logits.data(), 5), 1);
  }
  TokenSampler a({1.0, 0, 1.0}, 99), b({1.0, 0, 1.0}, 99), c({1.0, 0, 1.0}, 100);
  std::vector<int> da, db, dc;
  for (int i = 0; i < 64; ++i) {
    da.push_back(a.sample(logits.data(), 5));
    db.push_back(b.sample(logits.data(), 5));
    dc.push_back(c.sample(logits.data(), 5));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

TEST(TokenSampler, DrawsTheSoftmaxDistribution) {
  // P(1) = 3/4 for logits {0, ln 3}. Over n draws the frequency's standard deviation is
  // sqrt(p(1-p)/n) = 0.0068 for n = 4000: 5 of them is a bound a correct sampler misses with
  // probability below 1e-6.
  const std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0))};
  TokenSampler s({1.0, 0, 1.0}, 5);
  const int n = 4000;
  int ones = 0;
  for (int i = 0; i < n; ++i) ones += s.sample(logits.data(), 2);
  EXPECT_NEAR(ones / double(n), 0.75, 5 * std::sqrt(0.75 * 0.25 / n));
  // Temperature 0.5 squares the odds: P(1) = 9/10.
  TokenSampler cold({0.5, 0, 1.0}, 6);
  ones = 0;
  for (int i = 0; i < n; ++i) ones += cold.sample(logits.data(), 2);
  EXPECT_NEAR(ones / double(n), 0.9, 5 * std::sqrt(0.9 * 0.1 / n));
}

TEST(GenerateTokens, StreamsPastTheContextAndRepeatsForASeed) {
  TinyModel m;
  GptDecoder decoder(m.layout, m.params.data(), testing::cpu_backend(), testing::cpu_stream());
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  std::vector<std::int32_t> streamed;
  TokenSampler s1({0.8, 20, 0.95}, 11), s2({0.8, 20, 0.95}, 11);
  const auto first = generate_tokens(decoder, prompt, 40, s1, [&](std::int32_t id) { streamed.push_back(id); });
  const auto second = generate_tokens(decoder, prompt, 40, s2, nullptr);
  ASSERT_EQ(first.size(), 40u);  // 3 + 40 > the context of 16: the window slid
  EXPECT_EQ(first, streamed);
  EXPECT_EQ(first, second);
  for (std::int32_t id : first) EXPECT_TRUE(id >= 0 && id < m.cfg.vocab_size);
  EXPECT_THROW(generate_tokens(decoder, {}, 4, s1, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace pipelane
