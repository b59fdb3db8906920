#include "model/gpt_model.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model/normal_rng.h"

namespace pipelane {

namespace {

TensorParallelShard shard_of(const TensorParallelComm* tp) {
  return tp ? TensorParallelShard{tp->rank(), tp->size()} : TensorParallelShard{};
}

}  // namespace

GptStage::GptStage(const GptConfig& cfg, StageRange range, Backend& backend, Stream& stream,
                   TensorParallelComm* tp)
    : layout_(cfg, range, shard_of(tp)), backend_(backend), stream_(stream),
      tp_(tp && tp->size() > 1 ? tp : nullptr) {}

void GptStage::reduce_sum(float* data, std::size_t n) const {
  if (tp_) tp_->all_reduce_sum(data, n);
}

template <typename Alloc>
MicrobatchActivations GptStage::plan_activations(Alloc&& alloc, int B, int T,
                                                 bool split_backward) const {
  const std::size_t N = static_cast<std::size_t>(B) * T, C = config().d_model;
  const std::size_t NH = layout_.local_heads();
  const std::size_t CA = layout_.local_attn_width(), CM = layout_.local_mlp_width();
  MicrobatchActivations a;
  a.B = B;
  a.T = T;
  a.input = alloc(N * C, "activations.input");
  for (int l = 0; l < range().num_layers(); ++l) {
    LayerActivations x{};
    x.ln1 = alloc(N * C, "activations.ln1");
    x.ln1_mean = alloc(N, "activations.ln1_mean");
    x.ln1_rstd = alloc(N, "activations.ln1_rstd");
    x.qkv = alloc(N * 3 * CA, "activations.qkv");
    x.att = alloc(backend_.attention_saved_floats(B, T, static_cast<int>(CA), static_cast<int>(NH)),
                  "activations.att");
    x.atty = alloc(N * CA, "activations.atty");
    x.res_attn = alloc(N * C, "activations.res_attn");
    x.ln2 = alloc(N * C, "activations.ln2");
    x.ln2_mean = alloc(N, "activations.ln2_mean");
    x.ln2_rstd = alloc(N, "activations.ln2_rstd");
    x.fch = alloc(N * CM, "activations.fch");
    x.fch_gelu = alloc(N * CM, "activations.fch_gelu");
    x.res_out = alloc(N * C, "activations.res_out");
    if (split_backward) {
      x.d_res_out = alloc(N * C, "activations.d_res_out");
      x.d_fch = alloc(N * CM, "activations.d_fch");
      x.d_ln2 = alloc(N * C, "activations.d_ln2");
      x.d_res_attn = alloc(N * C, "activations.d_res_attn");
      x.d_qkv = alloc(N * 3 * CA, "activations.d_qkv");
      x.d_ln1 = alloc(N * C, "activations.d_ln1");
    }
    a.layers.push_back(x);
  }
  if (range().has_head) {
    a.lnf = alloc(N * C, "activations.lnf");
    a.lnf_mean = alloc(N, "activations.lnf_mean");
    a.lnf_rstd = alloc(N, "activations.lnf_rstd");
    a.losses = alloc(N, "activations.losses");
    a.dlnf = alloc(N * C, "activations.dlnf");
  }
  a.split_backward = split_backward;
  if (split_backward && range().has_embedding) a.d_input = alloc(N * C, "activations.d_input");
  return a;
}

template <typename Alloc>
StageScratch GptStage::plan_scratch(Alloc&& alloc, int B, int T) const {
  const std::size_t N = static_cast<std::size_t>(B) * T, C = config().d_model;
  StageScratch s;
  s.proj = alloc(N * C, "scratch.proj");
  s.dres = alloc(N * C, "scratch.dres");
  s.dtmp = alloc(N * C, "scratch.dtmp");
  s.dqkv = alloc(N * 3 * layout_.local_attn_width(), "scratch.dqkv");
  s.d4c = alloc(N * layout_.local_mlp_width(), "scratch.d4c");
  if (range().has_head) {
    if (tp_) {
      s.logits = alloc(backend_.lm_head_vocab_parallel_scratch_floats(static_cast<int>(N),
                                                                      layout_.vocab_local()),
                       "scratch.logits");
    } else {
      const int Vp = config().padded_vocab();
      s.logits = alloc(backend_.lm_head_scratch_floats(static_cast<int>(N), Vp), "scratch.logits");
    }
  }
  return s;
}

std::size_t GptStage::activation_bytes(int B, int T, bool split_backward) const {
  std::size_t total = 0;
  plan_activations(
      [&](std::size_t n, const char*) -> float* {
        total += align_up(n * sizeof(float), Arena::kDefaultAlignment);
        return nullptr;
      },
      B, T, split_backward);
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

MicrobatchActivations GptStage::allocate_activations(Arena& arena, int B, int T,
                                                     bool split_backward) const {
  return plan_activations([&](std::size_t n, const char* what) { return arena.allocate_n<float>(n, what); },
                          B, T, split_backward);
}

StageScratch GptStage::allocate_scratch(Arena& arena, int B, int T) const {
  return plan_scratch([&](std::size_t n, const char* what) { return arena.allocate_n<float>(n, what); },
                      B, T);
}

void GptStage::init_parameters(const ParamLayout& layout, float* params, std::uint64_t seed) {
  const GptConfig& cfg = layout.config();
  for (const ParamEntry& e : layout.entries()) {
    float* p = params + e.offset;
    if (e.init_std == 0.f) {
      for (std::size_t i = 0; i < e.numel; ++i) p[i] = e.init_value;
      continue;
    }
    // Padded vocabulary rows stay zero: they never receive gradient, and zero keeps them inert.
    std::size_t drawn = e.full_numel();
    if (e.name == "wte") drawn = static_cast<std::size_t>(cfg.vocab_size) * cfg.d_model;
    NormalRng rng(seed, e.name);
    if (!e.sharded()) {
      std::memset(p, 0, e.numel * sizeof(float));
      for (std::size_t i = 0; i < drawn; ++i) p[i] = e.init_std * rng.next();
      continue;
    }
    // A shard: walk the full tensor's stream in order and keep this rank's elements.
    std::memset(p, 0, e.numel * sizeof(float));
    for (std::size_t i = 0; i < drawn; ++i) {
      const float value = e.init_std * rng.next();
      const std::size_t local = local_index_of(e, i);
      if (local != ParamLayout::npos) p[local] = value;
    }
  }
}

double GptStage::forward(const float* params, float* grads, MicrobatchActivations& a,
                         StageScratch& s, const std::int32_t* tokens, const float* input,
                         const std::int32_t* targets, float loss_scale) const {
  const GptConfig& cfg = config();
  const ParamLayout& L = layout_;
  const int B = a.B, T = a.T, C = cfg.d_model;
  // This rank's heads, q/k/v width and MLP width (the whole model's when tp == 1).
  const int NH = L.local_heads(), CA = L.local_attn_width(), CM = L.local_mlp_width();
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  if (T > cfg.max_seq_len) throw std::invalid_argument("GptStage::forward: T exceeds max_seq_len");
  if (a.weight_grad_pending)
    throw std::logic_error(
        "GptStage::forward: these activations still wait for their backward_weight");

  if (range().has_embedding) {
    if (tp_) {
      backend_.embedding_lookup_local(a.input, tokens, params + L.wte, N, C, L.vocab_begin(),
                                      L.vocab_local(), stream_);
      reduce_sum(a.input, NC);
      backend_.add_positions(a.input, params + L.wpe, B, T, C, stream_);
    } else {
      backend_.embedding_forward(a.input, tokens, params + L.wte, params + L.wpe, B, T, C, stream_);
    }
  } else {
    backend_.copy(a.input, input, NC * sizeof(float), stream_);
  }

  // Row-parallel layers: partial products, all-reduced, then the (replicated) bias added once.
  // With tp == 1 the bias stays fused into the matmul, exactly as before tensor parallelism.
  const float* x = a.input;
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    const LayerOffsets& o = L.layers[l];
    LayerActivations& h = a.layers[l];
    backend_.layernorm_forward(h.ln1, h.ln1_mean, h.ln1_rstd, x, params + o.ln1w, params + o.ln1b, N, C, stream_);
    // Column-parallel c_attn: this rank's q, k and v ([N, 3*CA], laid out [q | k | v]).
    backend_.matmul_forward(h.qkv, h.ln1, params + o.qkvw, params + o.qkvb, N, C, 3 * CA, stream_);
    backend_.attention_forward(h.atty, h.att, h.qkv, B, T, CA, NH, stream_);
    backend_.matmul_forward(s.proj, h.atty, params + o.attprojw, tp_ ? nullptr : params + o.attprojb,
                        N, CA, C, stream_);
    if (tp_) {
      reduce_sum(s.proj, NC);
      backend_.add_bias(s.proj, params + o.attprojb, N, C, stream_);
    }
    backend_.add(h.res_attn, x, s.proj, NC, stream_);
    backend_.layernorm_forward(h.ln2, h.ln2_mean, h.ln2_rstd, h.res_attn, params + o.ln2w,
                           params + o.ln2b, N, C, stream_);
    backend_.matmul_gelu_forward(h.fch, h.fch_gelu, h.ln2, params + o.fcw, params + o.fcb, N, C, CM, stream_);
    backend_.matmul_forward(s.proj, h.fch_gelu, params + o.fcprojw, tp_ ? nullptr : params + o.fcprojb,
                        N, CM, C, stream_);
    if (tp_) {
      reduce_sum(s.proj, NC);
      backend_.add_bias(s.proj, params + o.fcprojb, N, C, stream_);
    }
    backend_.add(h.res_out, h.res_attn, s.proj, NC, stream_);
    x = h.res_out;
    layer_done();
  }
  if (!range().has_head) return 0.0;
  backend_.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, params + L.lnfw, params + L.lnfb, N, C, stream_);
  a.head_grad_ready = grads != nullptr;
  if (tp_) {
    TensorParallelComm* comm = tp_;
    const GroupReduce reduce{
        [comm](float* d, std::size_t n) { comm->all_reduce_sum(d, n); },
        [comm](float* d, std::size_t n) { comm->all_reduce_max(d, n); }};
    return backend_.lm_head_cross_entropy_vocab_parallel(
        a.losses, grads ? a.dlnf : nullptr, grads ? grads + L.wte : nullptr, a.lnf, params + L.wte,
        targets, N, C, cfg.vocab_size, L.vocab_begin(), L.vocab_local(), loss_scale, s.logits,
        reduce, stream_);
  }
  return backend_.lm_head_cross_entropy(a.losses, grads ? a.dlnf : nullptr,
                                    grads ? grads + L.wte : nullptr, a.lnf, params + L.wte, targets,
                                    N, C, cfg.vocab_size, cfg.padded_vocab(), loss_scale, s.logits, stream_);
}

void GptStage::backward(const float* params, float* grads, MicrobatchActivations& a,
                        StageScratch& s, const std::int32_t* tokens, const float* grad_output,
                        float* grad_input) const {
  const GptConfig& cfg = config();
  const ParamLayout& L = layout_;
  const int B = a.B, T = a.T, C = cfg.d_model;
  const int NH = L.local_heads(), CA = L.local_attn_width(), CM = L.local_mlp_width();
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float* stage_out = a.output();

  // Under tensor parallelism s.dres (the residual stream's gradient) is identical on every rank:
  // it starts from the all-reduced head gradient (or the same grad_output), and every update to
  // it is a replicated op on all-reduced inputs. That is why the replicated tensors' gradients
  // (LayerNorms, c_proj biases, wpe) come out identical on every rank without a reduce.
  if (range().has_head) {
    if (!a.head_grad_ready)
      throw std::logic_error("GptStage::backward: forward ran without gradients (grads == null)");
    a.head_grad_ready = false;
    backend_.memset_zero(s.dres, NC * sizeof(float), stream_);
    backend_.layernorm_backward(s.dres, grads + L.lnfw, grads + L.lnfb, a.dlnf, stage_out,
                            params + L.lnfw, a.lnf_mean, a.lnf_rstd, N, C, stream_);
  } else {
    backend_.copy(s.dres, grad_output, NC * sizeof(float), stream_);
  }

  for (int l = static_cast<int>(a.layers.size()) - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layers[l];
    LayerActivations& h = a.layers[l];
    const float* x = l == 0 ? a.input : a.layers[l - 1].res_out;
    // MLP: res_out = res_attn + fcproj(gelu(fc(ln2(res_attn))))
    backend_.matmul_backward(nullptr, grads + o.fcprojw, grads + o.fcprojb, s.dres, h.fch_gelu,
                         params + o.fcprojw, N, CM, C, stream_);
    backend_.matmul_backward_input_dgelu(s.d4c, s.dres, params + o.fcprojw, h.fch, N, CM, C, stream_);
    backend_.matmul_backward(s.dtmp, grads + o.fcw, grads + o.fcb, s.d4c, h.ln2, params + o.fcw, N, C,
                         CM, stream_);
    reduce_sum(s.dtmp, NC);  // backward of column-parallel c_fc's input ("f")
    backend_.layernorm_backward(s.dres, grads + o.ln2w, grads + o.ln2b, s.dtmp, h.res_attn,
                            params + o.ln2w, h.ln2_mean, h.ln2_rstd, N, C, stream_);
    // Attention: res_attn = x + attproj(attention(qkv(ln1(x))))
    backend_.matmul_backward(s.dtmp, grads + o.attprojw, grads + o.attprojb, s.dres, h.atty,
                         params + o.attprojw, N, CA, C, stream_);  // s.dtmp holds [N, CA] here
    backend_.attention_backward(s.dqkv, s.dtmp, h.qkv, h.atty, h.att, B, T, CA, NH, stream_);
    backend_.matmul_backward(s.dtmp, grads + o.qkvw, grads + o.qkvb, s.dqkv, h.ln1, params + o.qkvw, N,
                         C, 3 * CA, stream_);
    reduce_sum(s.dtmp, NC);  // backward of column-parallel c_attn's input ("f")
    backend_.layernorm_backward(s.dres, grads + o.ln1w, grads + o.ln1b, s.dtmp, x, params + o.ln1w,
                            h.ln1_mean, h.ln1_rstd, N, C, stream_);
    layer_done();
  }

  if (range().has_embedding) {
    if (tp_)
      backend_.embedding_backward_local(grads + L.wte, grads + L.wpe, s.dres, tokens, B, T, C,
                                        L.vocab_begin(), L.vocab_local(), stream_);
    else
      backend_.embedding_backward(grads + L.wte, grads + L.wpe, s.dres, tokens, B, T, C, stream_);
  } else {
    backend_.copy(grad_input, s.dres, NC * sizeof(float), stream_);
  }
}

// backward() split for zero-bubble schedules. backward_input runs backward()'s input-gradient ops
// in the same order on the same values, but keeps every gradient that a weight gradient consumes
// in acts (the layer's d_* buffers) instead of the shared scratch: the residual gradient is
// accumulated in d_res_out[l] -> (copy) d_res_attn[l] -> (copy) d_res_out[l-1] rather than in
// place in s.dres, which gives the same bits. backward_weight then makes exactly backward()'s
// weight-gradient calls on those buffers; each gradient tensor receives one += per microbatch
// either way, so the results are bit-identical.
void GptStage::backward_input(const float* params, float* grads, MicrobatchActivations& a,
                              StageScratch& s, const std::int32_t* tokens,
                              const float* grad_output, float* grad_input) const {
  (void)grads;   // all of this stage's parameter gradients are W's (or, for the head, forward's)
  (void)tokens;  // only the embedding's backward (W) needs them
  if (!a.split_backward)
    throw std::logic_error(
        "GptStage::backward_input: activations were allocated without split_backward");
  if (a.weight_grad_pending)
    throw std::logic_error(
        "GptStage::backward_input: the previous backward_input on these activations still waits "
        "for its backward_weight");
  const GptConfig& cfg = config();
  const ParamLayout& L = layout_;
  const int B = a.B, T = a.T, C = cfg.d_model;
  const int NH = L.local_heads(), CA = L.local_attn_width(), CM = L.local_mlp_width();
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const int nl = static_cast<int>(a.layers.size());
  // Where the gradient of layer l's input goes: layer l-1's d_res_out, or for l == 0 the stage's
  // input gradient (kept for the embedding's W on the first stage, else the caller's grad_input).
  auto grad_of_layer_input = [&](int l) -> float* {
    if (l > 0) return a.layers[l - 1].d_res_out;
    return range().has_embedding ? a.d_input : grad_input;
  };

  float* dtop = grad_of_layer_input(nl);  // gradient of the stage's output
  if (range().has_head) {
    if (!a.head_grad_ready)
      throw std::logic_error(
          "GptStage::backward_input: forward ran without gradients (grads == null)");
    a.head_grad_ready = false;
    backend_.memset_zero(dtop, NC * sizeof(float), stream_);
    backend_.layernorm_backward_input(dtop, a.dlnf, a.output(), params + L.lnfw, a.lnf_mean,
                                  a.lnf_rstd, N, C, stream_);
  } else if (dtop != grad_output) {
    backend_.copy(dtop, grad_output, NC * sizeof(float), stream_);
  }

  for (int l = nl - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layers[l];
    LayerActivations& h = a.layers[l];
    const float* x = l == 0 ? a.input : a.layers[l - 1].res_out;
    backend_.matmul_backward_input_dgelu(h.d_fch, h.d_res_out, params + o.fcprojw, h.fch, N, CM, C, stream_);
    backend_.matmul_backward_input(h.d_ln2, h.d_fch, params + o.fcw, N, C, CM, stream_);
    reduce_sum(h.d_ln2, NC);  // backward of column-parallel c_fc's input ("f")
    backend_.copy(h.d_res_attn, h.d_res_out, NC * sizeof(float), stream_);
    backend_.layernorm_backward_input(h.d_res_attn, h.d_ln2, h.res_attn, params + o.ln2w, h.ln2_mean,
                                  h.ln2_rstd, N, C, stream_);
    backend_.matmul_backward_input(s.dtmp, h.d_res_attn, params + o.attprojw, N, CA, C, stream_);  // [N, CA]
    backend_.attention_backward(h.d_qkv, s.dtmp, h.qkv, h.atty, h.att, B, T, CA, NH, stream_);
    backend_.matmul_backward_input(h.d_ln1, h.d_qkv, params + o.qkvw, N, C, 3 * CA, stream_);
    reduce_sum(h.d_ln1, NC);  // backward of column-parallel c_attn's input ("f")
    float* dx = grad_of_layer_input(l);
    backend_.copy(dx, h.d_res_attn, NC * sizeof(float), stream_);
    backend_.layernorm_backward_input(dx, h.d_ln1, x, params + o.ln1w, h.ln1_mean, h.ln1_rstd, N, C, stream_);
    layer_done();
  }
  a.weight_grad_pending = true;
}

void GptStage::backward_weight(const float* params, float* grads, MicrobatchActivations& a,
                               StageScratch& s, const std::int32_t* tokens) const {
  (void)s;
  if (!a.split_backward)
    throw std::logic_error(
        "GptStage::backward_weight: activations were allocated without split_backward");
  if (!a.weight_grad_pending)
    throw std::logic_error("GptStage::backward_weight: no backward_input ran on these activations");
  const ParamLayout& L = layout_;
  const int B = a.B, T = a.T, C = config().d_model;
  const int CA = L.local_attn_width(), CM = L.local_mlp_width();
  const int N = B * T;

  if (range().has_head)
    backend_.layernorm_backward_params(grads + L.lnfw, grads + L.lnfb, a.dlnf, a.output(), a.lnf_mean,
                                   a.lnf_rstd, N, C, stream_);
  for (int l = static_cast<int>(a.layers.size()) - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layers[l];
    const LayerActivations& h = a.layers[l];
    const float* x = l == 0 ? a.input : a.layers[l - 1].res_out;
    backend_.matmul_backward(nullptr, grads + o.fcprojw, grads + o.fcprojb, h.d_res_out, h.fch_gelu,
                         params + o.fcprojw, N, CM, C, stream_);
    backend_.matmul_backward(nullptr, grads + o.fcw, grads + o.fcb, h.d_fch, h.ln2, params + o.fcw, N,
                         C, CM, stream_);
    backend_.layernorm_backward_params(grads + o.ln2w, grads + o.ln2b, h.d_ln2, h.res_attn,
                                   h.ln2_mean, h.ln2_rstd, N, C, stream_);
    backend_.matmul_backward(nullptr, grads + o.attprojw, grads + o.attprojb, h.d_res_attn, h.atty,
                         params + o.attprojw, N, CA, C, stream_);
    backend_.matmul_backward(nullptr, grads + o.qkvw, grads + o.qkvb, h.d_qkv, h.ln1, params + o.qkvw,
                         N, C, 3 * CA, stream_);
    backend_.layernorm_backward_params(grads + o.ln1w, grads + o.ln1b, h.d_ln1, x, h.ln1_mean,
                                   h.ln1_rstd, N, C, stream_);
    layer_done();
  }
  if (range().has_embedding) {
    if (tp_)
      backend_.embedding_backward_local(grads + L.wte, grads + L.wpe, a.d_input, tokens, B, T, C,
                                        L.vocab_begin(), L.vocab_local(), stream_);
    else
      backend_.embedding_backward(grads + L.wte, grads + L.wpe, a.d_input, tokens, B, T, C, stream_);
  }
  a.weight_grad_pending = false;
}

void GptStage::logits(const float* params, const MicrobatchActivations& a, float* out) const {
  if (!range().has_head) throw std::logic_error("GptStage::logits: this stage has no head");
  backend_.lm_head_logits(out, a.lnf, params + layout_.wte, a.B * a.T, config().d_model,
                      layout_.vocab_local(), stream_);
}

}  // namespace pipelane
