// Incremental decoding of a whole model of either family (inference only): tokens are appended to a KV cache and
// the head's logits of the last position come back, so generating N tokens costs N single-row
// passes instead of N full-context forwards. Computes through a Backend on one Stream: the
// decoder copies the parameters (a whole-model layout's flat buffer, ParamLayout(cfg,
// StageRange::whole(cfg)), tp = 1) into one arena of backend memory with its cache and scratch,
// so any number of decoders may start from one host copy of a model.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/gpt_layout.h"
#include "runtime/backend.h"

namespace pipelane {

class GptDecoder {
 public:
  // `host_params` (layout.total_floats() floats in host memory) is copied in; `layout`, `backend`
  // and `stream` must outlive the decoder. Scratch is sized for `chunk` positions per pass (a
  // longer append runs in chunks; the result does not depend on the chunking).
  // std::invalid_argument unless the layout is the whole model at tp = 1.
  GptDecoder(const ParamLayout& layout, const float* host_params, Backend& backend, Stream& stream,
             int chunk = 64);

  int context() const { return context_; }  // positions the cache holds: max_seq_len
  int position() const { return position_; }  // positions filled
  int vocab_size() const { return layout_.config().vocab_size; }  // real columns of the logits
  void reset() { position_ = 0; }

  // Runs `tokens` at positions [position(), position() + n) through every layer, adds their keys
  // and values to the cache and returns the logits of the last one in host memory: padded_vocab
  // floats, valid until the next call (columns >= vocab_size are padding). std::invalid_argument
  // when n < 1, the cache would overflow or a token is out of range.
  const float* append(const std::int32_t* tokens, int n);

 private:
  void run_chunk(const std::int32_t* tokens, int n);
  void norm(const float* x, std::size_t w, std::size_t b, int n);  // into ln_
  void attend(const LayerOffsets& o, int l, int n);                // ln_ -> atty_

  const ParamLayout& layout_;
  Backend& backend_;
  Stream& stream_;
  int context_, chunk_;
  int position_ = 0;
  std::unique_ptr<Arena> memory_;  // everything below lives here (backend memory)
  float* params_ = nullptr;
  float *kcache_ = nullptr, *vcache_ = nullptr;  // [layers][context][kv_heads * head size]
  float *x_, *ln_, *mean_, *rstd_, *qkv_, *atty_, *proj_, *fch_, *fch_gelu_, *scores_, *logits_;
  float *up_ = nullptr, *rope_ = nullptr;  // SwiGLU's up projection; RoPE's table
  std::int32_t* tokens_ = nullptr;
  std::vector<float> host_logits_;
};

}  // namespace pipelane
