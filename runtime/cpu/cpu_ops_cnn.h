// The CPU backend's CNN ops (Backend's CNN family, runtime/backend.h has the semantics): the loops
// the CNN lanes ran on their own until issue 24 moved them behind the Backend, unchanged, so the
// lanes' CPU results are the same bits as before. One thread: each op is one block of a lane
// step's budget, and its sums must run in row order.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/backend.h"

namespace pipelane::cpu {

// ops_cnn_im2col.cpp
void cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1);
void cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0, std::int64_t r1);

// ops_batch_norm.cpp
void batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1);
void batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1);
void batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                  const float* var_unbiased, int C, float momentum);

// ops_pooling.cpp
void max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g, std::int64_t r0,
                      std::int64_t r1);
void max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                       std::int64_t r0, std::int64_t r1);
void adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1);
void adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                std::int64_t r1);

// ops_cnn_pointwise.cpp
void relu_forward(float* x, std::size_t n);
void relu_backward(float* dx, const float* y, std::size_t n);
void dropout(float* x, std::size_t n, std::uint64_t stream, std::uint64_t first, float p);
double classifier_cross_entropy(float* dlogits, const float* logits, const std::int32_t* labels, int n, int classes);
void sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n, const SgdMomentumParams& h);

}  // namespace pipelane::cpu
