#include "model/gpt_model.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model/normal_rng.h"
#include "runtime/ops.h"

namespace pipelane {

GptStage::GptStage(const GptConfig& cfg, StageRange range) : layout_(cfg, range) {}

template <typename Alloc>
MicrobatchActivations GptStage::plan_activations(Alloc&& alloc, int B, int T) const {
  const std::size_t N = static_cast<std::size_t>(B) * T, C = config().d_model;
  const std::size_t NH = config().heads;
  MicrobatchActivations a;
  a.B = B;
  a.T = T;
  a.input = alloc(N * C, "activations.input");
  for (int l = 0; l < range().num_layers(); ++l) {
    LayerActivations x{};
    x.ln1 = alloc(N * C, "activations.ln1");
    x.ln1_mean = alloc(N, "activations.ln1_mean");
    x.ln1_rstd = alloc(N, "activations.ln1_rstd");
    x.qkv = alloc(N * 3 * C, "activations.qkv");
    x.att = alloc(B * NH * T * T, "activations.att");
    x.atty = alloc(N * C, "activations.atty");
    x.res_attn = alloc(N * C, "activations.res_attn");
    x.ln2 = alloc(N * C, "activations.ln2");
    x.ln2_mean = alloc(N, "activations.ln2_mean");
    x.ln2_rstd = alloc(N, "activations.ln2_rstd");
    x.fch = alloc(N * 4 * C, "activations.fch");
    x.fch_gelu = alloc(N * 4 * C, "activations.fch_gelu");
    x.res_out = alloc(N * C, "activations.res_out");
    a.layers.push_back(x);
  }
  if (range().has_head) {
    a.lnf = alloc(N * C, "activations.lnf");
    a.lnf_mean = alloc(N, "activations.lnf_mean");
    a.lnf_rstd = alloc(N, "activations.lnf_rstd");
    a.losses = alloc(N, "activations.losses");
    a.dlnf = alloc(N * C, "activations.dlnf");
  }
  return a;
}

template <typename Alloc>
StageScratch GptStage::plan_scratch(Alloc&& alloc, int B, int T) const {
  const std::size_t N = static_cast<std::size_t>(B) * T, C = config().d_model;
  StageScratch s;
  s.proj = alloc(N * C, "scratch.proj");
  s.dres = alloc(N * C, "scratch.dres");
  s.dtmp = alloc(N * C, "scratch.dtmp");
  s.dqkv = alloc(N * 3 * C, "scratch.dqkv");
  s.d4c = alloc(N * 4 * C, "scratch.d4c");
  if (range().has_head) {
    const int Vp = config().padded_vocab();
    s.logits = alloc(static_cast<std::size_t>(cpu::lm_head_chunk_rows(static_cast<int>(N), Vp)) * Vp,
                     "scratch.logits");
  }
  return s;
}

std::size_t GptStage::activation_bytes(int B, int T) const {
  std::size_t total = 0;
  plan_activations(
      [&](std::size_t n, const char*) -> float* {
        total += align_up(n * sizeof(float), Arena::kDefaultAlignment);
        return nullptr;
      },
      B, T);
  return total;
}

std::size_t GptStage::scratch_bytes(int B, int T) const {
  std::size_t total = 0;
  plan_scratch(
      [&](std::size_t n, const char*) -> float* {
        total += align_up(n * sizeof(float), Arena::kDefaultAlignment);
        return nullptr;
      },
      B, T);
  return total;
}

MicrobatchActivations GptStage::allocate_activations(Arena& arena, int B, int T) const {
  return plan_activations([&](std::size_t n, const char* what) { return arena.allocate_n<float>(n, what); },
                          B, T);
}

StageScratch GptStage::allocate_scratch(Arena& arena, int B, int T) const {
  return plan_scratch([&](std::size_t n, const char* what) { return arena.allocate_n<float>(n, what); },
                      B, T);
}

void GptStage::init_parameters(const ParamLayout& layout, float* params, std::uint64_t seed) {
  const GptConfig& cfg = layout.config();
  for (const ParamEntry& e : layout.entries()) {
    float* p = params + e.offset;
    std::size_t n = e.numel;
    if (e.name == "wte") {
      // Padded vocabulary rows stay zero: they never receive gradient, and zero keeps them inert.
      std::memset(p, 0, n * sizeof(float));
      n = static_cast<std::size_t>(cfg.vocab_size) * cfg.d_model;
    }
    if (e.init_std == 0.f) {
      for (std::size_t i = 0; i < n; ++i) p[i] = e.init_value;
      continue;
    }
    NormalRng rng(seed, e.name);
    for (std::size_t i = 0; i < n; ++i) p[i] = e.init_std * rng.next();
  }
}

double GptStage::forward(const float* params, float* grads, MicrobatchActivations& a,
                         StageScratch& s, const std::int32_t* tokens, const float* input,
                         const std::int32_t* targets, float loss_scale) const {
  const GptConfig& cfg = config();
  const ParamLayout& L = layout_;
  const int B = a.B, T = a.T, C = cfg.d_model, NH = cfg.heads;
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  if (T > cfg.max_seq_len) throw std::invalid_argument("GptStage::forward: T exceeds max_seq_len");

  if (range().has_embedding)
    cpu::embedding_forward(a.input, tokens, params + L.wte, params + L.wpe, B, T, C);
  else
    std::memcpy(a.input, input, NC * sizeof(float));

  const float* x = a.input;
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    const LayerOffsets& o = L.layers[l];
    LayerActivations& h = a.layers[l];
    cpu::layernorm_forward(h.ln1, h.ln1_mean, h.ln1_rstd, x, params + o.ln1w, params + o.ln1b, N, C);
    cpu::matmul_forward(h.qkv, h.ln1, params + o.qkvw, params + o.qkvb, N, C, 3 * C);
    cpu::attention_forward(h.atty, h.att, h.qkv, B, T, C, NH);
    cpu::matmul_forward(s.proj, h.atty, params + o.attprojw, params + o.attprojb, N, C, C);
    cpu::add_forward(h.res_attn, x, s.proj, NC);
    cpu::layernorm_forward(h.ln2, h.ln2_mean, h.ln2_rstd, h.res_attn, params + o.ln2w,
                           params + o.ln2b, N, C);
    cpu::matmul_forward(h.fch, h.ln2, params + o.fcw, params + o.fcb, N, C, 4 * C);
    cpu::gelu_forward(h.fch_gelu, h.fch, NC * 4);
    cpu::matmul_forward(s.proj, h.fch_gelu, params + o.fcprojw, params + o.fcprojb, N, 4 * C, C);
    cpu::add_forward(h.res_out, h.res_attn, s.proj, NC);
    x = h.res_out;
  }
  if (!range().has_head) return 0.0;
  cpu::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, params + L.lnfw, params + L.lnfb, N, C);
  a.head_grad_ready = grads != nullptr;
  return cpu::lm_head_cross_entropy(a.losses, grads ? a.dlnf : nullptr,
                                    grads ? grads + L.wte : nullptr, a.lnf, params + L.wte, targets,
                                    N, C, cfg.vocab_size, cfg.padded_vocab(), loss_scale, s.logits);
}

void GptStage::backward(const float* params, float* grads, MicrobatchActivations& a,
                        StageScratch& s, const std::int32_t* tokens, const float* grad_output,
                        float* grad_input) const {
  const GptConfig& cfg = config();
  const ParamLayout& L = layout_;
  const int B = a.B, T = a.T, C = cfg.d_model, NH = cfg.heads;
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float* stage_out = a.output();

  if (range().has_head) {
    if (!a.head_grad_ready)
      throw std::logic_error("GptStage::backward: forward ran without gradients (grads == null)");
    a.head_grad_ready = false;
    std::memset(s.dres, 0, NC * sizeof(float));
    cpu::layernorm_backward(s.dres, grads + L.lnfw, grads + L.lnfb, a.dlnf, stage_out,
                            params + L.lnfw, a.lnf_mean, a.lnf_rstd, N, C);
  } else {
    std::memcpy(s.dres, grad_output, NC * sizeof(float));
  }

  for (int l = static_cast<int>(a.layers.size()) - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layers[l];
    LayerActivations& h = a.layers[l];
    const float* x = l == 0 ? a.input : a.layers[l - 1].res_out;
    // MLP: res_out = res_attn + fcproj(gelu(fc(ln2(res_attn))))
    cpu::matmul_backward(s.d4c, grads + o.fcprojw, grads + o.fcprojb, s.dres, h.fch_gelu,
                         params + o.fcprojw, N, 4 * C, C);
    cpu::gelu_backward(s.d4c, h.fch, s.d4c, NC * 4);
    cpu::matmul_backward(s.dtmp, grads + o.fcw, grads + o.fcb, s.d4c, h.ln2, params + o.fcw, N, C,
                         4 * C);
    cpu::layernorm_backward(s.dres, grads + o.ln2w, grads + o.ln2b, s.dtmp, h.res_attn,
                            params + o.ln2w, h.ln2_mean, h.ln2_rstd, N, C);
    // Attention: res_attn = x + attproj(attention(qkv(ln1(x))))
    cpu::matmul_backward(s.dtmp, grads + o.attprojw, grads + o.attprojb, s.dres, h.atty,
                         params + o.attprojw, N, C, C);
    cpu::attention_backward(s.dqkv, s.dtmp, h.qkv, h.att, B, T, C, NH);
    cpu::matmul_backward(s.dtmp, grads + o.qkvw, grads + o.qkvb, s.dqkv, h.ln1, params + o.qkvw, N,
                         C, 3 * C);
    cpu::layernorm_backward(s.dres, grads + o.ln1w, grads + o.ln1b, s.dtmp, x, params + o.ln1w,
                            h.ln1_mean, h.ln1_rstd, N, C);
  }

  if (range().has_embedding)
    cpu::embedding_backward(grads + L.wte, grads + L.wpe, s.dres, tokens, B, T, C);
  else
    std::memcpy(grad_input, s.dres, NC * sizeof(float));
}

void GptStage::logits(const float* params, const MicrobatchActivations& a, float* out) const {
  if (!range().has_head) throw std::logic_error("GptStage::logits: this stage has no head");
  cpu::lm_head_logits(out, a.lnf, params + layout_.wte, a.B * a.T, config().d_model,
                      config().padded_vocab());
}

}  // namespace pipelane
