// Tensor parallelism inside model/: tp ranks as threads (thread_tp_comm.h) must train the same
// model as tp = 1. Tolerances: the row-parallel layers and the vocab-parallel head sum tp partial
// products through the all-reduce instead of inside one sgemm (and the row sum of exp crosses the
// comm in float), so results differ from tp = 1 by float rounding; 1e-5 relative bounds that with
// margin at these sizes. Everything else (embedding lookup, replicated ops) is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/gpt_model.h"
#include "tests/model/thread_tp_comm.h"
#include "tests/support/cpu_backend_fixture.h"

namespace pipelane {
namespace {

using testing::ThreadTpGroup;

GptConfig tiny_config() {
  GptConfig c;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 16;
  c.vocab_size = 97;  // padded to 128: with tp = 4 the last rank holds one real row
  return c;
}

constexpr int kB = 2, kT = 12;
constexpr double kTol = 1e-5;

// One rank's stage with its own buffers.
struct RankState {
  std::unique_ptr<GptStage> stage;
  std::unique_ptr<Arena> arena;
  std::vector<float> params, grads, m, v;
  MicrobatchActivations acts;
  StageScratch scratch;
  RankState(const GptConfig& c, StageRange r, TensorParallelComm* comm, std::uint64_t seed) {
    stage = std::make_unique<GptStage>(c, r, testing::cpu_backend(), testing::cpu_stream(), comm);
    arena = std::make_unique<Arena>("tp", stage->activation_bytes(kB, kT) + stage->scratch_bytes(kB, kT));
    const std::size_t n = stage->layout().total_floats();
    params.assign(n, 0.f);
    grads.assign(n, 0.f);
    m.assign(n, 0.f);
    v.assign(n, 0.f);
    GptStage::init_parameters(stage->layout(), params.data(), seed);
    acts = stage->allocate_activations(*arena, kB, kT);
    scratch = stage->allocate_scratch(*arena, kB, kT);
  }
  double forward_backward(const std::vector<std::int32_t>& tokens,
                          const std::vector<std::int32_t>& targets, float scale) {
    const double loss = stage->forward(params.data(), grads.data(), acts, scratch, tokens.data(),
                                       nullptr, targets.data(), scale);
    stage->backward(params.data(), grads.data(), acts, scratch, tokens.data(), nullptr, nullptr);
    return loss;
  }
};

// Full tensor `name` reassembled from every rank's buffer (grads or params).
std::vector<float> gather(const std::vector<std::unique_ptr<RankState>>& ranks,
                          const std::string& name, std::vector<float> RankState::*buf) {
  std::vector<const ParamEntry*> entries;
  std::vector<const float*> data;
  for (const auto& r : ranks) {
    const ParamEntry* e = r->stage->layout().find(name);
    EXPECT_NE(e, nullptr) << name;
    entries.push_back(e);
    data.push_back(((*r).*buf).data() + e->offset);
  }
  std::vector<float> full(entries[0]->full_numel());
  gather_full_tensor(entries, data, full.data());
  return full;
}

std::vector<float> tensor(const RankState& r, const std::string& name,
                          const std::vector<float>& buf) {
  const ParamEntry* e = r.stage->layout().find(name);
  return {buf.begin() + e->offset, buf.begin() + e->offset + e->numel};
}

// max |a - b| / max |b|: relative to the tensor's scale, so near-zero elements of a gradient do
// not dominate.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

void random_tokens(std::vector<std::int32_t>& v, int vocab, unsigned seed) {
  std::mt19937 g(seed);
  for (auto& t : v) t = static_cast<std::int32_t>(g() % vocab);
}

TEST(TensorParallel, LayoutRecordsHowEveryTensorIsSharded) {
  const GptConfig c = tiny_config();
  const ParamLayout L(c, StageRange::whole(c), {1, 4});
  const int C = c.d_model;
  auto check = [&](const std::string& name, std::vector<std::int64_t> shape,
                   std::vector<std::int64_t> full, int dim, int blocks) {
    const ParamEntry* e = L.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->shape, shape) << name;
    EXPECT_EQ(e->full_shape, full) << name;
    EXPECT_EQ(e->shard_dim, dim) << name;
    EXPECT_EQ(e->shard_blocks, blocks) << name;
    EXPECT_EQ(e->tp_rank, 1);
    EXPECT_EQ(e->tp_size, 4);
  };
  check("wte", {32, C}, {128, C}, 0, 1);
  check("wpe", {16, C}, {16, C}, -1, 1);
  check("h.1.ln_1.weight", {C}, {C}, -1, 1);
  check("h.1.attn.c_attn.weight", {3 * C / 4, C}, {3 * C, C}, 0, 3);
  check("h.1.attn.c_attn.bias", {3 * C / 4}, {3 * C}, 0, 3);
  check("h.1.attn.c_proj.weight", {C, C / 4}, {C, C}, 1, 1);
  check("h.1.attn.c_proj.bias", {C}, {C}, -1, 1);
  check("h.1.mlp.c_fc.weight", {C, C}, {4 * C, C}, 0, 1);
  check("h.1.mlp.c_proj.weight", {C, C}, {C, 4 * C}, 1, 1);
  check("h.1.mlp.c_proj.bias", {C}, {C}, -1, 1);
  check("ln_f.bias", {C}, {C}, -1, 1);
  EXPECT_EQ(L.vocab_begin(), 32);
  EXPECT_EQ(L.vocab_local(), 32);
  // c_attn rank 1 of 4: q rows [8,16), k rows [40,48), v rows [72,80) of the full [96, 32].
  const ParamEntry& qkv = *L.find("h.1.attn.c_attn.weight");
  EXPECT_EQ(full_index_of(qkv, 0), 8u * C);
  EXPECT_EQ(full_index_of(qkv, 8u * C), 40u * C);
  EXPECT_EQ(full_index_of(qkv, 16u * C + 3), 72u * C + 3);
  EXPECT_EQ(local_index_of(qkv, 0), ParamLayout::npos);
  for (const ParamEntry& e : L.entries())
    for (std::size_t i = 0; i < e.numel; ++i)
      ASSERT_EQ(local_index_of(e, full_index_of(e, i)), i) << e.name;
  // Padding: unchanged when tp divides the padded vocabulary, else a multiple of 64 * tp.
  EXPECT_EQ(c.padded_vocab_for_tp(4), 128);
  EXPECT_EQ(c.padded_vocab_for_tp(3), 192);
  GptConfig g2 = c;
  g2.vocab_size = 50257;
  for (int tp : {1, 2, 4, 8}) EXPECT_EQ(g2.padded_vocab_for_tp(tp), 50304);
  // heads must split evenly.
  EXPECT_THROW(ParamLayout(c, StageRange::whole(c), {0, 3}), std::invalid_argument);
  EXPECT_THROW(ParamLayout(c, StageRange::whole(c), {2, 2}), std::invalid_argument);
}

TEST(TensorParallel, ShardsInitialiseAsSlicesOfTheFullModel) {
  const GptConfig c = tiny_config();
  RankState whole(c, StageRange::whole(c), nullptr, 11);
  for (int tp : {2, 4}) {
    ThreadTpGroup group(tp);
    std::vector<std::unique_ptr<RankState>> ranks;
    for (int r = 0; r < tp; ++r)
      ranks.push_back(std::make_unique<RankState>(c, StageRange::whole(c), &group.comm(r), 11));
    for (const ParamEntry& e : whole.stage->layout().entries()) {
      const auto full = tensor(whole, e.name, whole.params);
      ASSERT_EQ(gather(ranks, e.name, &RankState::params), full) << e.name << " tp " << tp;
      for (const auto& rank : ranks) {
        const ParamEntry& s = *rank->stage->layout().find(e.name);
        std::vector<float> slice(s.numel);
        slice_from_full(s, full.data(), slice.data());
        ASSERT_EQ(tensor(*rank, e.name, rank->params), slice) << e.name;
      }
    }
    // Arena sizes for a shard are exact too.
    EXPECT_EQ(ranks[0]->arena->used(), ranks[0]->arena->capacity());
  }
}

// Runs one forward + backward at tp and compares with tp = 1. Returns the worst relative error.
double check_loss_and_gradients(int tp, int vocab, GptConfig c = tiny_config()) {
  c.vocab_size = vocab;
  std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
  random_tokens(tokens, c.vocab_size, 21);
  random_tokens(targets, c.vocab_size, 22);
  targets[3] = vocab - 1;  // the highest real row
  tokens[5] = vocab - 1;
  const float scale = 1.0f / (kB * kT);

  RankState whole(c, StageRange::whole(c), nullptr, 5);
  const double loss1 = whole.forward_backward(tokens, targets, scale);

  ThreadTpGroup group(tp);
  std::vector<std::unique_ptr<RankState>> ranks(tp);
  std::vector<double> losses(tp);
  std::vector<std::vector<float>> logits(tp);
  group.run([&](int r, TensorParallelComm& comm) {
    ranks[r] = std::make_unique<RankState>(c, StageRange::whole(c), &comm, 5);
    losses[r] = ranks[r]->forward_backward(tokens, targets, scale);
    logits[r].resize(static_cast<std::size_t>(kB * kT) * ranks[r]->stage->layout().vocab_local());
    ranks[r]->stage->logits(ranks[r]->params.data(), ranks[r]->acts, logits[r].data());
  });

  double worst = std::fabs(losses[0] - loss1) / std::fabs(loss1);
  for (int r = 0; r < tp; ++r) EXPECT_EQ(losses[r], losses[0]) << "rank " << r;
  EXPECT_LE(worst, kTol) << "loss tp " << tp << ": " << losses[0] << " vs " << loss1;

  // Every rank's logits are its columns of the whole model's.
  std::vector<float> full_logits(static_cast<std::size_t>(kB * kT) * c.padded_vocab());
  whole.stage->logits(whole.params.data(), whole.acts, full_logits.data());
  const int Vl = c.padded_vocab() / tp;
  for (int r = 0; r < tp; ++r) {
    std::vector<float> cols;
    for (int n = 0; n < kB * kT; ++n)
      for (int v = 0; v < Vl; ++v) cols.push_back(full_logits[n * c.padded_vocab() + r * Vl + v]);
    EXPECT_LE(rel_err(logits[r], cols), kTol) << "logits rank " << r;
  }

  for (const ParamEntry& e : whole.stage->layout().entries()) {
    const double err = rel_err(gather(ranks, e.name, &RankState::grads), tensor(whole, e.name, whole.grads));
    EXPECT_LE(err, kTol) << e.name << " tp " << tp;
    worst = std::max(worst, err);
    // Replicated tensors: identical gradients on every rank, by construction (never reduced).
    if (e.shard_dim < 0) {
      for (int r = 1; r < tp; ++r)
        EXPECT_EQ(tensor(*ranks[r], e.name, ranks[r]->grads), tensor(*ranks[0], e.name, ranks[0]->grads))
            << e.name << " rank " << r;
    }
  }
  return worst;
}

TEST(TensorParallel, LossAndEveryGradientMatchTp1) {
  for (int tp : {2, 4}) {
    const double worst = check_loss_and_gradients(tp, 97);
    std::printf("[ tp=%d ] max relative error of loss/gradients vs tp=1: %.3g\n", tp, worst);
  }
  // Vocabulary 65 (padded 128) at tp = 4: rank 2 holds one real row, rank 3 only padding.
  const double worst = check_loss_and_gradients(4, 65);
  std::printf("[ tp=4, V=65 ] max relative error of loss/gradients vs tp=1: %.3g\n", worst);
}

// The Llama family: q heads and kv heads split across the ranks (4 on 2 kv heads at tp 2, MQA's
// one kv head only at tp 1: tp must divide kv_heads), SwiGLU's gate/up column-parallel,
// o_proj/down_proj row-parallel with a replicated bias (bias = all), an untied vocab-parallel head.
TEST(TensorParallel, LlamaFamilyLossAndEveryGradientMatchTp1) {
  GptConfig c = tiny_config();
  c.apply_arch_defaults(ModelArch::Llama);
  c.kv_heads = 2;
  c.ffn_hidden = 48;
  c.rope_theta = 10000;
  for (BiasKind bias : {BiasKind::None, BiasKind::Qkv, BiasKind::All}) {
    c.bias = bias;
    const double worst = check_loss_and_gradients(2, 97, c);
    std::printf("[ llama bias=%s tp=2 ] max relative error of loss/gradients vs tp=1: %.3g\n", bias_name(bias), worst);
  }
  c.tie_embeddings = true;
  EXPECT_LE(check_loss_and_gradients(2, 65, c), 1e-5);
}

TEST(TensorParallel, AdamWStepsWithClippingMatchTp1) {
  const GptConfig c = tiny_config();
  constexpr int kSteps = 3;
  const float lr = 1e-2f, max_norm = 0.5f;
  AdamWConfig opt;
  std::vector<std::vector<std::int32_t>> tokens(kSteps, std::vector<std::int32_t>(kB * kT)),
      targets = tokens;
  for (int s = 0; s < kSteps; ++s) {
    random_tokens(tokens[s], c.vocab_size, 100 + s);
    random_tokens(targets[s], c.vocab_size, 200 + s);
  }
  const float scale = 1.0f / (kB * kT);

  // tp = 1. Per step, each element's AdamW denominator sqrt(v_hat) and each tensor's gradient
  // noise scale are kept for the parameter bound below.
  RankState whole(c, StageRange::whole(c), nullptr, 9);
  std::vector<double> loss1, norm1;
  std::vector<std::vector<float>> rms_grad(kSteps);   // sqrt(v_hat) per element, after step s
  std::vector<std::vector<float>> grad_noise(kSteps); // per element: the noise scale of its tensor
  for (int s = 0; s < kSteps; ++s) {
    std::fill(whole.grads.begin(), whole.grads.end(), 0.f);
    loss1.push_back(whole.forward_backward(tokens[s], targets[s], scale));
    EXPECT_EQ(grad_sum_squares_for_global_norm(whole.stage->layout(), whole.grads.data(), testing::cpu_backend(), testing::cpu_stream()),
              grad_sum_squares(whole.stage->layout(), whole.grads.data(), testing::cpu_backend(), testing::cpu_stream()));
    norm1.push_back(std::sqrt(grad_sum_squares(whole.stage->layout(), whole.grads.data(), testing::cpu_backend(), testing::cpu_stream())));
    const float clip = clip_scale(norm1.back(), max_norm);
    adamw_step(whole.stage->layout(), whole.params.data(), whole.grads.data(), whole.m.data(),
               whole.v.data(), opt, lr, s + 1, clip, testing::cpu_backend(), testing::cpu_stream());
    const double bias2 = 1.0 - std::pow(static_cast<double>(opt.beta2), s + 1);
    rms_grad[s].resize(whole.v.size());
    grad_noise[s].resize(whole.v.size());
    for (std::size_t i = 0; i < whole.v.size(); ++i) rms_grad[s][i] = static_cast<float>(std::sqrt(whole.v[i] / bias2));
    for (const ParamEntry& e : whole.stage->layout().entries()) {
      float largest = 0;
      for (std::size_t i = 0; i < e.numel; ++i) largest = std::max(largest, std::fabs(whole.grads[e.offset + i] * clip));
      // A gradient element is a sum of fp32 products (over the B*T rows, after backward's own
      // reductions over C): another summation order moves it by a few hundred units of roundoff
      // (u = 6e-8) of the tensor's largest gradient at most; 1e-5 x that is the noise scale.
      for (std::size_t i = 0; i < e.numel; ++i) grad_noise[s][e.offset + i] = 1e-5f * largest;
    }
  }
  ASSERT_GT(norm1[0], max_norm) << "the test means to exercise clipping";

  // What AdamW can do with gradient noise. Its step is lr * m_hat / (sqrt(v_hat) + eps), and by
  // Cauchy-Schwarz |m_hat / sqrt(v_hat)| <= c_t = (1-b1)/sqrt(1-b2) * sqrt(sum_{k<t} (b1^2/b2)^k)
  // * sqrt(1-b2^t) / (1-b1^t) (here about 1). A gradient perturbed by noise d moves the ratio by
  // about d / sqrt(v_hat), never by more than 2 c_t. So element i of the two runs may differ by
  //   2 lr * sum_t min(c_t, noise_t / sqrt(v_hat_t[i]))     (plus 1e-5 relative for the rest):
  // tiny for ordinary parameters, up to lr per step for those whose gradient is pure rounding
  // noise (the key bias of c_attn: softmax ignores a constant shift of a query's scores), and
  // zero for a gradient that is exactly zero in both runs (vocabulary padding).
  const auto adam_ratio_bound = [&](int t) {
    const double b1 = opt.beta1, b2 = opt.beta2;
    double geometric = 0;
    for (int k = 0; k < t; ++k) geometric += std::pow(b1 * b1 / b2, k);
    return (1 - b1) / std::sqrt(1 - b2) * std::sqrt(geometric) * std::sqrt(1 - std::pow(b2, t)) /
           (1 - std::pow(b1, t));
  };

  for (int tp : {2, 4}) {
    ThreadTpGroup group(tp);
    std::vector<std::unique_ptr<RankState>> ranks(tp);
    std::vector<std::vector<double>> loss(tp), norm(tp);
    group.run([&](int r, TensorParallelComm& comm) {
      ranks[r] = std::make_unique<RankState>(c, StageRange::whole(c), &comm, 9);
      RankState& st = *ranks[r];
      for (int s = 0; s < kSteps; ++s) {
        std::fill(st.grads.begin(), st.grads.end(), 0.f);
        loss[r].push_back(st.forward_backward(tokens[s], targets[s], scale));
        float sq = static_cast<float>(
            grad_sum_squares_for_global_norm(st.stage->layout(), st.grads.data(), testing::cpu_backend(), testing::cpu_stream()));
        comm.all_reduce_sum(&sq, 1);
        norm[r].push_back(std::sqrt(double(sq)));
        adamw_step(st.stage->layout(), st.params.data(), st.grads.data(), st.m.data(), st.v.data(),
                   opt, lr, s + 1, clip_scale(norm[r].back(), max_norm), testing::cpu_backend(), testing::cpu_stream());
      }
    });
    double worst_loss = 0, worst_norm = 0, worst_share = 0;
    for (int s = 0; s < kSteps; ++s) {
      for (int r = 1; r < tp; ++r) EXPECT_EQ(loss[r][s], loss[0][s]);
      worst_loss = std::max(worst_loss, std::fabs(loss[0][s] - loss1[s]) / loss1[s]);
      worst_norm = std::max(worst_norm, std::fabs(norm[0][s] - norm1[s]) / norm1[s]);
      EXPECT_NEAR(loss[0][s], loss1[s], kTol * loss1[s]) << "step " << s << " tp " << tp;
      EXPECT_NEAR(norm[0][s], norm1[s], kTol * norm1[s]) << "step " << s << " tp " << tp;
    }
    std::size_t checked = 0, loose = 0;
    for (const ParamEntry& e : whole.stage->layout().entries()) {
      const auto got = gather(ranks, e.name, &RankState::params), want = tensor(whole, e.name, whole.params);
      for (std::size_t i = 0; i < want.size(); ++i) {
        double allowed = 1e-5 * std::fabs(want[i]);
        double noise_steps = 0;
        for (int s = 0; s < kSteps; ++s) {
          const std::size_t at = e.offset + i;  // tp = 1 layout: the full tensor in place
          // A gradient that is exactly zero (vocabulary padding rows) gives AdamW nothing to move.
          const double ratio_move = rms_grad[s][at] > 0 ? grad_noise[s][at] / rms_grad[s][at] : 0.0;
          noise_steps += std::min(adam_ratio_bound(s + 1), ratio_move);
        }
        allowed += 2 * lr * noise_steps;
        const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
        ASSERT_LE(diff, allowed) << e.name << "[" << i << "] tp " << tp << ": " << got[i] << " vs " << want[i];
        worst_share = std::max(worst_share, allowed > 0 ? diff / allowed : 0.0);
        ++checked;
        loose += noise_steps > 0.1;
      }
    }
    // The bound must stay tight for almost every parameter (it is not a blanket tolerance). Here
    // 378 of 30080 (1.3%) have noise-level gradients: the c_attn key biases (zero gradient in
    // exact arithmetic) and key-weight entries, plus a few rare embedding rows.
    EXPECT_LT(loose, checked / 50) << loose << " of " << checked << " parameters had noise-level gradients";
    std::printf("[ tp=%d ] 3 AdamW steps: max rel err loss %.3g, grad norm %.3g; params within %.0f%% of "
                "their AdamW bound (%zu of %zu with noise-level gradients)\n",
                tp, worst_loss, worst_norm, 100 * worst_share, loose, checked);
  }
}

TEST(TensorParallel, PipelineSplitWithTpMatchesWholeModel) {
  const GptConfig c = tiny_config();
  const int tp = 2;
  std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
  random_tokens(tokens, c.vocab_size, 31);
  random_tokens(targets, c.vocab_size, 32);
  const float scale = 1.0f / (kB * kT);
  RankState whole(c, StageRange::whole(c), nullptr, 3);
  const double loss1 = whole.forward_backward(tokens, targets, scale);

  ThreadTpGroup group(tp);
  std::vector<std::unique_ptr<RankState>> first(tp), last(tp);
  std::vector<double> losses(tp);
  group.run([&](int r, TensorParallelComm& comm) {
    first[r] = std::make_unique<RankState>(c, StageRange{0, 1, true, false}, &comm, 3);
    last[r] = std::make_unique<RankState>(c, StageRange{1, 2, false, true}, &comm, 3);
    RankState &f = *first[r], &l = *last[r];
    f.stage->forward(f.params.data(), f.grads.data(), f.acts, f.scratch, tokens.data(), nullptr,
                     nullptr, scale);
    losses[r] = l.stage->forward(l.params.data(), l.grads.data(), l.acts, l.scratch, nullptr,
                                 f.acts.output(), targets.data(), scale);
    std::vector<float> boundary(static_cast<std::size_t>(kB) * kT * c.d_model);
    l.stage->backward(l.params.data(), l.grads.data(), l.acts, l.scratch, nullptr, nullptr,
                      boundary.data());
    f.stage->backward(f.params.data(), f.grads.data(), f.acts, f.scratch, tokens.data(),
                      boundary.data(), nullptr);
  });
  EXPECT_NEAR(losses[0], loss1, kTol * loss1);
  EXPECT_EQ(losses[1], losses[0]);
  double worst = 0;
  for (const ParamEntry& e : whole.stage->layout().entries()) {
    const auto want = tensor(whole, e.name, whole.grads);
    std::vector<float> got;
    if (e.name == "wte") {  // tied: the first stage's part plus the last stage's
      got = gather(first, e.name, &RankState::grads);
      const auto head = gather(last, e.name, &RankState::grads);
      for (std::size_t i = 0; i < got.size(); ++i) got[i] += head[i];
    } else {
      got = gather(first[0]->stage->layout().find(e.name) ? first : last, e.name, &RankState::grads);
    }
    const double err = rel_err(got, want);
    EXPECT_LE(err, kTol) << e.name;
    worst = std::max(worst, err);
  }
  std::printf("[ pp=2 x tp=2 ] max relative error of gradients vs whole model: %.3g\n", worst);
}

}  // namespace
}  // namespace pipelane
