// nn.BatchNorm2d in training mode on NHWC features: statistics of the whole batch (M = N*H*W
// values per channel), biased variance to normalise, eps 1e-5; the running mean and the running
// (unbiased) variance move by momentum 0.1 in update_statistics(), once the step's backward is done.
//
// Forward is three phases over the rows, so a block never needs rows it has not seen: 0 sums x,
// 1 sums (x - mean)^2 (two passes: no cancellation), 2 normalises. Backward is two: 0 sums dy and
// dy * xhat, 1 writes dx. The sums are doubles in block order, fixed by the program. The math is
// Backend::batch_norm_forward / batch_norm_backward / batch_norm_update_statistics.
#pragma once
#include "lanes/builtin/cnn/cnn_layer.h"

namespace pipelane::cnn {

inline constexpr float kBatchNormEps = 1e-5f;
inline constexpr float kBatchNormMomentum = 0.1f;

class BatchNormLayer final : public CnnLayer {
 public:
  BatchNormLayer(std::string name, Feature* in, Feature* out, CnnParam* weight, CnnParam* bias,
                 CnnBuffer* running_mean, CnnBuffer* running_var);
  std::string name() const override { return name_; }
  std::vector<LayerPhase> forward_phases() const override;
  std::vector<LayerPhase> backward_phases() const override;
  void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) override;
  std::vector<Feature*> grad_inputs() const override { return {in_}; }
  void plan_buffers(BufferPlan& plan) override;
  void update_statistics(CnnCompute& c) override;
  std::vector<std::pair<float*, std::size_t>> statistics_state() override;

 private:
  std::string name_;
  Feature* in_;
  Feature* out_;
  CnnParam* weight_;
  CnnParam* bias_;
  CnnBuffer* running_mean_;
  CnnBuffer* running_var_;
  BatchNormTensors tensors() const;
  // Per channel, in the arena.
  double* sum_a_ = nullptr;  // forward: sum x, then sum (x - mean)^2; backward: sum dy
  double* sum_b_ = nullptr;  // backward: sum dy * xhat
  float* mean_ = nullptr;
  float* rstd_ = nullptr;
  float* var_unbiased_ = nullptr;  // for the running variance
};

}  // namespace pipelane::cnn
