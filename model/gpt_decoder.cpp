#include "model/gpt_decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/rope_table.h"

namespace pipelane {

namespace {
const float* at(const float* base, std::size_t offset) { return offset == ParamLayout::npos ? nullptr : base + offset; }
}  // namespace

GptDecoder::GptDecoder(const ParamLayout& layout, const float* host_params, Backend& backend,
                       Stream& stream, int chunk)
    : layout_(layout), backend_(backend), stream_(stream), context_(layout.config().max_seq_len),
      chunk_(std::max(1, chunk)) {
  const StageRange& r = layout.range();
  const GptConfig& c = layout.config();
  if (r.first_layer != 0 || r.last_layer != c.layers || !r.has_embedding || !r.has_head || layout.tp().size != 1)
    throw std::invalid_argument("GptDecoder needs the whole model's layout at tp = 1");
  chunk_ = std::min(chunk_, context_);
  const std::size_t C = c.d_model, T = context_, n = chunk_, L = c.layers;
  const std::size_t KV = static_cast<std::size_t>(layout.local_kv_width()), F = static_cast<std::size_t>(c.mlp_hidden());
  const std::size_t P = layout.total_floats(), V = layout.padded_vocab();
  const bool swiglu = c.mlp == MlpKind::SwiGlu, rope = c.position == PositionKind::Rope;
  // q, k, v: GPT-2's fused [n, 3C], or [n, C + 2 KV] for separate projections.
  const std::size_t qkv = c.split_projections() ? n * (C + 2 * KV) : n * 3 * C;
  const std::size_t floats[] = {P,   L * T * KV, L * T * KV, n * C, n * C, n,     n,
                                qkv, n * C,      n * C,      n * F, n * F, swiglu ? n * F : 0,
                                n * static_cast<std::size_t>(c.heads) * T, V, rope ? T * c.head_size() : 0};
  std::size_t bytes = align_up(n * sizeof(std::int32_t), Arena::kDefaultAlignment);
  for (std::size_t f : floats) bytes += align_up(f * sizeof(float), Arena::kDefaultAlignment);
  memory_ = backend.create_arena("decoder", bytes, MemoryKind::Device);
  const auto take = [&](std::size_t f, const char* what) { return memory_->allocate_n<float>(f, what); };
  params_ = take(P, "decoder.params");
  kcache_ = take(L * T * KV, "decoder.kcache");
  vcache_ = take(L * T * KV, "decoder.vcache");
  x_ = take(n * C, "decoder.x");
  ln_ = take(n * C, "decoder.ln");
  mean_ = take(n, "decoder.mean");
  rstd_ = take(n, "decoder.rstd");
  qkv_ = take(qkv, "decoder.qkv");
  atty_ = take(n * C, "decoder.atty");
  proj_ = take(n * C, "decoder.proj");
  fch_ = take(n * F, "decoder.fch");
  fch_gelu_ = take(n * F, "decoder.fch_gelu");
  if (swiglu) up_ = take(n * F, "decoder.up");
  scores_ = take(n * static_cast<std::size_t>(c.heads) * T, "decoder.scores");
  logits_ = take(V, "decoder.logits");
  if (rope) rope_ = take(T * c.head_size(), "decoder.rope");
  tokens_ = memory_->allocate_n<std::int32_t>(n, "decoder.tokens");
  backend.copy(params_, host_params, P * sizeof(float), stream);
  const std::vector<float> table = rope ? rope_table(c, context_) : std::vector<float>{};
  if (rope) backend.copy(rope_, table.data(), table.size() * sizeof(float), stream);
  host_logits_.resize(V);
  stream.synchronize();
}

const float* GptDecoder::append(const std::int32_t* tokens, int n) {
  const GptConfig& c = layout_.config();
  if (n < 1) throw std::invalid_argument("GptDecoder::append: no token");
  if (position_ + n > context_)
    throw std::invalid_argument("GptDecoder::append: " + std::to_string(position_ + n) + " positions exceed the context of " +
                                std::to_string(context_));
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw std::invalid_argument("GptDecoder::append: token " + std::to_string(tokens[i]) + " is not in [0, " +
                                  std::to_string(c.vocab_size) + ")");
  int last_rows = 0;
  for (int done = 0; done < n; done += last_rows) {
    last_rows = std::min(chunk_, n - done);
    run_chunk(tokens + done, last_rows);
  }
  // The head on the last position only: the final norm, then the head (the tied embedding or lm_head).
  const int C = c.d_model;
  const float* last = x_ + static_cast<std::size_t>(last_rows - 1) * C;
  norm(last, layout_.lnfw, layout_.lnfb, 1);
  backend_.lm_head_logits(logits_, ln_, params_ + layout_.head, 1, C, layout_.padded_vocab(), stream_);
  backend_.copy(host_logits_.data(), logits_, host_logits_.size() * sizeof(float), stream_);
  stream_.synchronize();
  return host_logits_.data();
}

void GptDecoder::norm(const float* x, std::size_t w, std::size_t b, int n) {
  const GptConfig& c = layout_.config();
  if (c.norm == NormKind::LayerNorm)
    backend_.layernorm_forward(ln_, mean_, rstd_, x, params_ + w, params_ + b, n, c.d_model, stream_);
  else
    backend_.rmsnorm_forward(ln_, rstd_, x, params_ + w, n, c.d_model, c.norm_eps, stream_);
}

// The attention sublayer of positions [position_, position_ + n) into atty_, the layer's K and V
// appended to its caches.
void GptDecoder::attend(const LayerOffsets& o, int l, int n) {
  const GptConfig& c = layout_.config();
  const int C = c.d_model, NH = c.heads, KVH = c.n_kv_heads(), hs = c.head_size(), KV = KVH * hs, p0 = position_;
  const std::size_t TKV = static_cast<std::size_t>(context_) * KV;
  const float* P = params_;
  Backend& b = backend_;
  Stream& s = stream_;
  const bool rope = c.position == PositionKind::Rope;
  if (!c.split_projections()) {
    b.matmul_forward(qkv_, ln_, P + o.qkvw, at(P, o.qkvb), n, C, 3 * C, s);
    if (rope) {
      b.rope_forward(qkv_, rope_, 1, n, p0, NH, hs, 3 * C, s);
      b.rope_forward(qkv_ + C, rope_, 1, n, p0, NH, hs, 3 * C, s);
    }
    b.attention_forward_kv(atty_, scores_, qkv_, kcache_ + l * TKV, vcache_ + l * TKV, p0, n, C, NH, s);
    return;
  }
  float* q = qkv_;
  float* k = q + static_cast<std::size_t>(n) * C;
  float* v = k + static_cast<std::size_t>(n) * KV;
  b.matmul_forward(q, ln_, P + o.qkvw, at(P, o.qkvb), n, C, C, s);
  b.matmul_forward(k, ln_, P + o.kw, at(P, o.kb), n, C, KV, s);
  b.matmul_forward(v, ln_, P + o.vw, at(P, o.vb), n, C, KV, s);
  if (rope) {
    b.rope_forward(q, rope_, 1, n, p0, NH, hs, C, s);
    b.rope_forward(k, rope_, 1, n, p0, KVH, hs, KV, s);
  }
  b.attention_forward_kv_gqa(atty_, scores_, q, k, v, kcache_ + l * TKV, vcache_ + l * TKV, p0, n, NH, KVH, hs, s);
}

// Positions [position_, position_ + n) through every layer; the residual stream ends in x_.
void GptDecoder::run_chunk(const std::int32_t* tokens, int n) {
  const GptConfig& c = layout_.config();
  const int C = c.d_model, F = c.mlp_hidden(), p0 = position_;
  const std::size_t nC = static_cast<std::size_t>(n) * C;
  const float* P = params_;
  Backend& b = backend_;
  Stream& s = stream_;
  b.copy(tokens_, tokens, n * sizeof(std::int32_t), s);
  // Token embeddings, then (learned positions) positions p0.. (consecutive rows of wpe).
  b.embedding_lookup_local(x_, tokens_, P + layout_.wte, n, C, 0, layout_.padded_vocab(), s);
  if (c.has_learned_positions()) b.add_inplace(x_, P + layout_.wpe + static_cast<std::size_t>(p0) * C, nC, s);
  for (int l = 0; l < c.layers; ++l) {
    const LayerOffsets& o = layout_.layers[l];
    norm(x_, o.ln1w, o.ln1b, n);
    attend(o, l, n);
    b.matmul_forward(proj_, atty_, P + o.attprojw, at(P, o.attprojb), n, C, C, s);
    b.add_inplace(x_, proj_, nC, s);
    norm(x_, o.ln2w, o.ln2b, n);
    if (c.mlp == MlpKind::Gelu) {
      b.matmul_gelu_forward(fch_, fch_gelu_, ln_, P + o.fcw, at(P, o.fcb), n, C, F, s);
    } else {
      b.matmul_forward(fch_, ln_, P + o.gatew, at(P, o.gateb), n, C, F, s);
      b.matmul_forward(up_, ln_, P + o.fcw, at(P, o.fcb), n, C, F, s);
      b.swiglu_forward(fch_gelu_, fch_, up_, static_cast<std::size_t>(n) * F, s);
    }
    b.matmul_forward(proj_, fch_gelu_, P + o.fcprojw, at(P, o.fcprojb), n, F, C, s);
    b.add_inplace(x_, proj_, nC, s);
  }
  position_ += n;
}

}  // namespace pipelane
