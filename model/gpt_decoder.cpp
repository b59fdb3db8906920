#include "model/gpt_decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pipelane {

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
  const std::size_t P = layout.total_floats(), V = layout.padded_vocab();
  const std::size_t floats[] = {P,     L * T * C, L * T * C, n * C,     n * C, n,         n,
                                n * 3 * C, n * C, n * C,     n * 4 * C, n * 4 * C,
                                n * static_cast<std::size_t>(c.heads) * T, V};
  std::size_t bytes = align_up(n * sizeof(std::int32_t), Arena::kDefaultAlignment);
  for (std::size_t f : floats) bytes += align_up(f * sizeof(float), Arena::kDefaultAlignment);
  memory_ = backend.create_arena("decoder", bytes, MemoryKind::Device);
  const auto take = [&](std::size_t f, const char* what) { return memory_->allocate_n<float>(f, what); };
  params_ = take(P, "decoder.params");
  kcache_ = take(L * T * C, "decoder.kcache");
  vcache_ = take(L * T * C, "decoder.vcache");
  x_ = take(n * C, "decoder.x");
  ln_ = take(n * C, "decoder.ln");
  mean_ = take(n, "decoder.mean");
  rstd_ = take(n, "decoder.rstd");
  qkv_ = take(n * 3 * C, "decoder.qkv");
  atty_ = take(n * C, "decoder.atty");
  proj_ = take(n * C, "decoder.proj");
  fch_ = take(n * 4 * C, "decoder.fch");
  fch_gelu_ = take(n * 4 * C, "decoder.fch_gelu");
  scores_ = take(n * static_cast<std::size_t>(c.heads) * T, "decoder.scores");
  logits_ = take(V, "decoder.logits");
  tokens_ = memory_->allocate_n<std::int32_t>(n, "decoder.tokens");
  backend.copy(params_, host_params, P * sizeof(float), stream);
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
  // The head on the last position only: final layernorm, then the tied embedding.
  const int C = c.d_model;
  const float* last = x_ + static_cast<std::size_t>(last_rows - 1) * C;
  backend_.layernorm_forward(ln_, mean_, rstd_, last, params_ + layout_.lnfw, params_ + layout_.lnfb, 1, C, stream_);
  backend_.lm_head_logits(logits_, ln_, params_ + layout_.wte, 1, C, layout_.padded_vocab(), stream_);
  backend_.copy(host_logits_.data(), logits_, host_logits_.size() * sizeof(float), stream_);
  stream_.synchronize();
  return host_logits_.data();
}

// Positions [position_, position_ + n) through every layer; the residual stream ends in x_.
void GptDecoder::run_chunk(const std::int32_t* tokens, int n) {
  const GptConfig& c = layout_.config();
  const int C = c.d_model, NH = c.heads, p0 = position_;
  const std::size_t nC = static_cast<std::size_t>(n) * C, TC = static_cast<std::size_t>(context_) * C;
  const float* P = params_;
  Backend& b = backend_;
  Stream& s = stream_;
  b.copy(tokens_, tokens, n * sizeof(std::int32_t), s);
  // Token embeddings, then positions p0.. (consecutive rows of wpe).
  b.embedding_lookup_local(x_, tokens_, P + layout_.wte, n, C, 0, layout_.padded_vocab(), s);
  b.add_inplace(x_, P + layout_.wpe + static_cast<std::size_t>(p0) * C, nC, s);
  for (int l = 0; l < c.layers; ++l) {
    const LayerOffsets& o = layout_.layers[l];
    b.layernorm_forward(ln_, mean_, rstd_, x_, P + o.ln1w, P + o.ln1b, n, C, s);
    b.matmul_forward(qkv_, ln_, P + o.qkvw, P + o.qkvb, n, C, 3 * C, s);
    b.attention_forward_kv(atty_, scores_, qkv_, kcache_ + l * TC, vcache_ + l * TC, p0, n, C, NH, s);
    b.matmul_forward(proj_, atty_, P + o.attprojw, P + o.attprojb, n, C, C, s);
    b.add_inplace(x_, proj_, nC, s);
    b.layernorm_forward(ln_, mean_, rstd_, x_, P + o.ln2w, P + o.ln2b, n, C, s);
    b.matmul_gelu_forward(fch_, fch_gelu_, ln_, P + o.fcw, P + o.fcb, n, C, 4 * C, s);
    b.matmul_forward(proj_, fch_gelu_, P + o.fcprojw, P + o.fcprojb, n, 4 * C, C, s);
    b.add_inplace(x_, proj_, nC, s);
  }
  position_ += n;
}

}  // namespace pipelane
