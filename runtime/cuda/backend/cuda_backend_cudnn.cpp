// [model] attention = cudnn: causal attention as cuDNN operation graphs (plans/attention_graph.h)
// run by the AttentionEngine. The forward saves only the softmax statistics [B,NH,T] in `att`
// (instead of the probabilities [B,NH,T,T]); the backward recomputes the probabilities from qkv
// and the statistics, and reads the forward's output. q, k, v are read in place from qkv and the
// results written in place: no permutes. In bf16 compute the graphs run on bf16 copies (cuDNN's
// fused engines take bf16, not fp32) and their bf16 results are widened to the fp32 storage.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>

#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/cuda_ops.h"

namespace pipelane::cuda {

namespace {

std::size_t count(int B, int T, int C) { return static_cast<std::size_t>(B) * T * C; }

}  // namespace

void CudaBackendImpl::attention_forward_cudnn(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                                              Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_forward", {out, att, qkv});
  const AttentionGraphKey key{false, B, T, C, NH, bf16_compute() ? DataType::BF16 : DataType::F32};
  const Temp<char> workspace(*scratch_, attention_->prepare(key), h);
  if (!bf16_compute()) {
    attention_->run(key, {{GraphBuffer::Qkv, const_cast<float*>(qkv)}, {GraphBuffer::Out, out}, {GraphBuffer::Stats, att}},
                    workspace.get(), h);
    return;
  }
  const std::size_t n = count(B, T, C);
  const Bf16Copy qkv16(*scratch_, qkv, 3 * n, h);
  const Temp<bf16> out16(*scratch_, n, h);
  attention_->run(key,
                  {{GraphBuffer::Qkv, const_cast<bf16*>(qkv16.get())},
                   {GraphBuffer::Out, out16.get()},
                   {GraphBuffer::Stats, att}},
                  workspace.get(), h);
  convert_to_float<bf16>(out, out16.get(), n, h);
}

void CudaBackendImpl::attention_backward_cudnn(float* dqkv, const float* dout, const float* qkv, const float* out,
                                               const float* att, int B, int T, int C, int NH, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_backward", {dqkv, dout, qkv, out, att});
  const AttentionGraphKey key{true, B, T, C, NH, bf16_compute() ? DataType::BF16 : DataType::F32};
  const Temp<char> workspace(*scratch_, attention_->prepare(key), h);
  std::map<GraphBuffer, void*> buffers{{GraphBuffer::Stats, const_cast<float*>(att)}};
  if (!bf16_compute()) {
    buffers[GraphBuffer::Qkv] = const_cast<float*>(qkv);
    buffers[GraphBuffer::Out] = const_cast<float*>(out);
    buffers[GraphBuffer::DOut] = const_cast<float*>(dout);
    buffers[GraphBuffer::DQkv] = dqkv;
    attention_->run(key, buffers, workspace.get(), h);
    return;
  }
  const std::size_t n = count(B, T, C);
  const Bf16Copy qkv16(*scratch_, qkv, 3 * n, h), out16(*scratch_, out, n, h), dout16(*scratch_, dout, n, h);
  const Temp<bf16> dqkv16(*scratch_, 3 * n, h);
  buffers[GraphBuffer::Qkv] = const_cast<bf16*>(qkv16.get());
  buffers[GraphBuffer::Out] = const_cast<bf16*>(out16.get());
  buffers[GraphBuffer::DOut] = const_cast<bf16*>(dout16.get());
  buffers[GraphBuffer::DQkv] = dqkv16.get();
  attention_->run(key, buffers, workspace.get(), h);
  convert_to_float<bf16>(dqkv, dqkv16.get(), 3 * n, h);
}

}  // namespace pipelane::cuda
