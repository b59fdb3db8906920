// The KV-cache decoder (model/gpt_decoder.h) for the configurable families: fed one token at a
// time or in chunks, its logits at every position equal a full forward pass of GptStage (RoPE at
// absolute positions, GQA on the cached kv heads, SwiGLU, an untied head, RMSNorm).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/gpt_decoder.h"
#include "model/gpt_model.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

GptConfig base() {
  GptConfig c;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 16;
  c.vocab_size = 97;
  return c;
}

std::vector<GptConfig> configs() {
  GptConfig llama = base();
  llama.apply_arch_defaults(ModelArch::Llama);
  llama.kv_heads = 1;  // multi-query
  llama.ffn_hidden = 40;
  llama.bias = BiasKind::Qkv;
  llama.rope_scaling = {4, 1, 4, 16};
  GptConfig gpt2_rope = base();
  gpt2_rope.norm = NormKind::RmsNorm;
  gpt2_rope.position = PositionKind::Rope;
  gpt2_rope.tie_embeddings = false;
  return {llama, gpt2_rope, base()};
}

TEST(FamilyDecoder, LogitsAtEveryPositionEqualTheFullForward) {
  for (const GptConfig& c : configs()) {
    SCOPED_TRACE(std::string(arch_name(c.arch)) + " " + position_name(c.position));
    const int T = 11;
    GptStage stage(c, StageRange::whole(c), testing::cpu_backend(), testing::cpu_stream());
    std::vector<float> params(stage.layout().total_floats());
    GptStage::init_parameters(stage.layout(), params.data(), 3);
    for (const ParamEntry& e : stage.layout().entries())  // norms and biases away from 1 and 0
      if (e.shape.size() == 1)
        for (std::size_t i = 0; i < e.numel; ++i) params[e.offset + i] += 0.05f * static_cast<float>(i % 7) - 0.1f;
    std::vector<std::int32_t> tokens(T), targets(T, 0);
    std::mt19937 g(5);
    for (auto& t : tokens) t = static_cast<std::int32_t>(g() % c.vocab_size);
    Arena arena("decoder test", stage.activation_bytes(1, T) + stage.scratch_bytes(1, T));
    MicrobatchActivations a = stage.allocate_activations(arena, 1, T);
    StageScratch s = stage.allocate_scratch(arena, 1, T);
    stage.forward(params.data(), nullptr, a, s, tokens.data(), nullptr, targets.data(), 1.f);
    const int Vp = c.padded_vocab();
    std::vector<float> full(static_cast<std::size_t>(T) * Vp);
    stage.logits(params.data(), a, full.data());
    for (int chunk : {1, 4}) {
      GptDecoder d(stage.layout(), params.data(), testing::cpu_backend(), testing::cpu_stream(), chunk);
      for (int t = 0; t < T; ++t) {
        const float* got = d.append(&tokens[t], 1);
        double diff = 0, scale = 0;
        for (int v = 0; v < c.vocab_size; ++v) {
          diff = std::max(diff, std::fabs(double(got[v]) - full[static_cast<std::size_t>(t) * Vp + v]));
          scale = std::max(scale, std::fabs(double(full[static_cast<std::size_t>(t) * Vp + v])));
        }
        // The decoder's softmax uses std::exp, training's a 2e-7 approximation: a few ulps.
        EXPECT_LE(diff, 1e-5 * scale) << "position " << t << " chunk " << chunk;
      }
      d.reset();
      const float* all = d.append(tokens.data(), T);  // one call, chunked inside
      double diff = 0;
      for (int v = 0; v < c.vocab_size; ++v)
        diff = std::max(diff, std::fabs(double(all[v]) - full[static_cast<std::size_t>(T - 1) * Vp + v]));
      EXPECT_LE(diff, 1e-4);
    }
  }
}

}  // namespace
}  // namespace pipelane
