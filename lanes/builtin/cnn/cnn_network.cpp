#include "lanes/builtin/cnn/cnn_network.h"

#include "lanes/builtin/cnn/cnn_init.h"

#include <vector>

namespace pipelane::cnn {

Feature* CnnNetwork::add_feature(std::string name, int n, int h, int w, int c, bool needs_grad) {
  Feature f;
  f.name = std::move(name);
  f.n = n, f.h = h, f.w = w, f.c = c;
  f.needs_grad = needs_grad;
  features_.push_back(std::move(f));
  return &features_.back();
}

CnnParam* CnnNetwork::add_param(std::string name, std::vector<int> torch_shape, ParamInit init, int fan,
                                int channels, int spatial) {
  CnnParam p;
  p.name = std::move(name);
  p.torch_shape = std::move(torch_shape);
  p.init = init;
  p.fan = fan;
  p.channels = channels;
  p.spatial = spatial;
  params_.push_back(std::move(p));
  return &params_.back();
}

CnnBuffer* CnnNetwork::add_buffer(std::string name, std::size_t size, float initial) {
  buffers_.push_back(CnnBuffer{std::move(name), size, initial, nullptr});
  return &buffers_.back();
}

void CnnNetwork::plan_buffers(BufferPlan& plan) {
  for (Feature& f : features_) {
    plan.add(&f.value, f.size(), "activations");
    if (f.needs_grad) plan.add(&f.grad, f.size(), "activation gradients");
  }
  for (CnnParam& p : params_) {
    plan.add(&p.value, p.size(), "parameters");
    plan.add(&p.grad, p.size(), "parameter gradients");
    plan.add(&p.momentum, p.size(), "momentum");
  }
  for (CnnBuffer& b : buffers_) plan.add(&b.value, b.size, "running statistics");
  plan.add(&labels, static_cast<std::size_t>(input->n), "labels");
  for (auto& layer : layers_) layer->plan_buffers(plan);
}

void CnnNetwork::initialise(std::uint64_t seed) {
  // Host memory: written in place.
  for (CnnParam& p : params_) initial_values(p, seed, p.value);
  for (CnnBuffer& b : buffers_)
    for (std::size_t i = 0; i < b.size; ++i) b.value[i] = b.initial;
}

void CnnNetwork::initialise(std::uint64_t seed, Backend& backend, Stream& stream) {
  std::vector<float> host;
  for (CnnParam& p : params_) {
    host.resize(p.size());
    initial_values(p, seed, host.data());
    backend.copy(p.value, host.data(), host.size() * sizeof(float), stream);
    stream.synchronize();  // before the staging is reused
    // Gradients accumulate from zero and momenta start at zero: an arena's memory need not be.
    backend.memset_zero(p.grad, p.size() * sizeof(float), stream);
    backend.memset_zero(p.momentum, p.size() * sizeof(float), stream);
  }
  for (CnnBuffer& b : buffers_) {
    host.assign(b.size, b.initial);
    backend.copy(b.value, host.data(), host.size() * sizeof(float), stream);
    stream.synchronize();
  }
}

const CnnParam* CnnNetwork::find_param(const std::string& name) const {
  for (const CnnParam& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const CnnBuffer* CnnNetwork::find_buffer(const std::string& name) const {
  for (const CnnBuffer& b : buffers_)
    if (b.name == name) return &b;
  return nullptr;
}

std::size_t CnnNetwork::parameter_count() const {
  std::size_t n = 0;
  for (const CnnParam& p : params_) n += p.size();
  return n;
}

}  // namespace pipelane::cnn
