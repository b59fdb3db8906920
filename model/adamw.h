// AdamW over one stage's flat parameter buffer, with PyTorch's conventions: decoupled weight
// decay on matrices and embeddings only, bias correction, global-norm clipping folded into the
// update as a gradient scale.
#pragma once
#include "model/gpt_layout.h"
#include "runtime/backend.h"

namespace pipelane {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// Sum of squares of every gradient of the layout (double; thread-count independent).
double grad_sum_squares(const ParamLayout& layout, const float* grads, Backend& backend,
                        Stream& stream);

// This stage's share of the squared global gradient norm under tensor parallelism: tensors split
// across the tp group (ParamEntry::sharded()) count on every rank, since the shards partition the
// full tensor; replicated ones (LayerNorms, wpe, the c_proj biases) count only on tp rank 0, since
// every rank holds the same gradient. all_reduce_sum of this over the tp group (and over pipeline
// stages) is the squared norm of the full model's gradient. Equals grad_sum_squares when tp == 1.
// (A wte held by two pipeline stages is the caller's to count once.)
double grad_sum_squares_for_global_norm(const ParamLayout& layout, const float* grads,
                                        Backend& backend, Stream& stream);

// The factor clip_grad_norm_ multiplies gradients by: min(1, max_norm / (norm + 1e-6)).
// max_norm <= 0 turns clipping off.
float clip_scale(double grad_norm, float max_norm);

// One step, t is 1-based. m and v share the parameters' layout. Works on tensor-parallel shards
// as is: AdamW is element-wise, and replicated tensors, with identical gradients on every rank,
// get identical updates.
void adamw_step(const ParamLayout& layout, float* params, const float* grads, float* m, float* v,
                const AdamWConfig& cfg, float lr, int t, float grad_scale, Backend& backend,
                Stream& stream);

}  // namespace pipelane
