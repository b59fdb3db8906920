#include "model/gpt_decoder.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/ops.h"

namespace pipelane {

GptDecoder::GptDecoder(const ParamLayout& layout, const float* params, int chunk)
    : layout_(layout), params_(params), context_(layout.config().max_seq_len), chunk_(std::max(1, chunk)) {
  const StageRange& r = layout.range();
  const GptConfig& c = layout.config();
  if (r.first_layer != 0 || r.last_layer != c.layers || !r.has_embedding || !r.has_head || layout.tp().size != 1)
    throw std::invalid_argument("GptDecoder needs the whole model's layout at tp = 1");
  chunk_ = std::min(chunk_, context_);
  const std::size_t C = c.d_model, T = context_, n = chunk_;
  kcache_.assign(static_cast<std::size_t>(c.layers) * T * C, 0.f);
  vcache_.assign(static_cast<std::size_t>(c.layers) * T * C, 0.f);
  x_.resize(n * C);
  ln_.resize(n * C);
  mean_.resize(n);
  rstd_.resize(n);
  qkv_.resize(n * 3 * C);
  atty_.resize(n * C);
  proj_.resize(n * C);
  fch_.resize(n * 4 * C);
  fch_gelu_.resize(n * 4 * C);
  scores_.resize(n * static_cast<std::size_t>(c.heads) * T);
  logits_.resize(static_cast<std::size_t>(layout.padded_vocab()));
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
  const float* last = x_.data() + static_cast<std::size_t>(last_rows - 1) * C;
  cpu::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), last, params_ + layout_.lnfw, params_ + layout_.lnfb, 1, C);
  cpu::lm_head_logits(logits_.data(), ln_.data(), params_ + layout_.wte, 1, C, layout_.padded_vocab());
  return logits_.data();
}

// Positions [position_, position_ + n) through every layer; the residual stream ends in x_.
void GptDecoder::run_chunk(const std::int32_t* tokens, int n) {
  const GptConfig& c = layout_.config();
  const int C = c.d_model, NH = c.heads, p0 = position_;
  const std::size_t nC = static_cast<std::size_t>(n) * C, TC = static_cast<std::size_t>(context_) * C;
  const float* P = params_;
  for (int i = 0; i < n; ++i) {
    const float* w = P + layout_.wte + static_cast<std::size_t>(tokens[i]) * C;
    const float* p = P + layout_.wpe + static_cast<std::size_t>(p0 + i) * C;
    float* o = x_.data() + static_cast<std::size_t>(i) * C;
    for (int k = 0; k < C; ++k) o[k] = w[k] + p[k];
  }
  for (int l = 0; l < c.layers; ++l) {
    const LayerOffsets& o = layout_.layers[l];
    float* K = kcache_.data() + l * TC;
    float* V = vcache_.data() + l * TC;
    cpu::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), P + o.ln1w, P + o.ln1b, n, C);
    cpu::matmul_forward(qkv_.data(), ln_.data(), P + o.qkvw, P + o.qkvb, n, C, 3 * C);
    for (int i = 0; i < n; ++i) {
      const float* row = qkv_.data() + static_cast<std::size_t>(i) * 3 * C;
      std::memcpy(K + static_cast<std::size_t>(p0 + i) * C, row + C, C * sizeof(float));
      std::memcpy(V + static_cast<std::size_t>(p0 + i) * C, row + 2 * C, C * sizeof(float));
    }
    cpu::attention_forward_kv(atty_.data(), scores_.data(), qkv_.data(), 3 * C, K, V, n, p0, C, NH);
    cpu::matmul_forward(proj_.data(), atty_.data(), P + o.attprojw, P + o.attprojb, n, C, C);
    cpu::add_inplace(x_.data(), proj_.data(), nC);
    cpu::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), P + o.ln2w, P + o.ln2b, n, C);
    cpu::matmul_forward(fch_.data(), ln_.data(), P + o.fcw, P + o.fcb, n, C, 4 * C);
    cpu::gelu_forward(fch_gelu_.data(), fch_.data(), static_cast<std::size_t>(n) * 4 * C);
    cpu::matmul_forward(proj_.data(), fch_gelu_.data(), P + o.fcprojw, P + o.fcprojb, n, 4 * C, C);
    cpu::add_inplace(x_.data(), proj_.data(), nC);
  }
  position_ += n;
}

}  // namespace pipelane
