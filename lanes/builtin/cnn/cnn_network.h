// A CNN as the lanes train it: its features (NHWC activations and their gradients), parameters,
// running statistics and layers in forward order, every buffer placed in the lane's arena by one
// plan. The model builders (cnn_models.h) fill it; the trainer (cnn_trainer.h) runs it.
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "lanes/builtin/cnn/cnn_layer.h"

namespace pipelane::cnn {

class CnnNetwork {
 public:
  CnnNetwork() = default;
  CnnNetwork(const CnnNetwork&) = delete;
  CnnNetwork& operator=(const CnnNetwork&) = delete;

  Feature* add_feature(std::string name, int n, int h, int w, int c, bool needs_grad = true);
  CnnParam* add_param(std::string name, std::vector<int> torch_shape, ParamInit init, int fan, int channels = 1,
                      int spatial = 1);
  CnnBuffer* add_buffer(std::string name, std::size_t size, float initial);
  void add_layer(std::unique_ptr<CnnLayer> layer) { layers_.push_back(std::move(layer)); }

  // The images [batch, size, size, 3] and the logits [batch, 1, 1, classes]; labels per image.
  Feature* input = nullptr;
  Feature* logits = nullptr;
  std::int32_t* labels = nullptr;

  // Every buffer the network needs besides im2col scratch: values, gradients, momenta, statistics.
  void plan_buffers(BufferPlan& plan);
  // Initial values (cnn_init.h) and running statistics (mean 0, variance 1), made on the host and
  // copied in through the backend (the buffers may be device memory).
  void initialise(std::uint64_t seed, Backend& backend, Stream& stream);
  // The same, written in place: only for buffers in host memory.
  void initialise(std::uint64_t seed);

  std::vector<std::unique_ptr<CnnLayer>>& layers() { return layers_; }
  std::deque<CnnParam>& params() { return params_; }
  std::deque<CnnBuffer>& buffers() { return buffers_; }
  std::deque<Feature>& features() { return features_; }
  const CnnParam* find_param(const std::string& name) const;
  const CnnBuffer* find_buffer(const std::string& name) const;
  std::size_t parameter_count() const;

 private:
  std::deque<Feature> features_;  // deques: layers hold pointers into them
  std::deque<CnnParam> params_;
  std::deque<CnnBuffer> buffers_;
  std::vector<std::unique_ptr<CnnLayer>> layers_;
};

}  // namespace pipelane::cnn
