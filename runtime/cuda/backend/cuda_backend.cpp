// The CUDA backend: construction, memory, streams and events, and the ops that are one kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/backend/cuda_check.h"
#include "runtime/cuda/cuda_ops.h"

namespace pipelane::cuda {

DeviceInts::DeviceInts(ScratchPool& pool, const std::int32_t* ids, std::size_t n, cudaStream_t stream)
    : ptr_(ids) {
  cudaPointerAttributes attr{};
  if (!ids || (cudaPointerGetAttributes(&attr, ids) == cudaSuccess && attr.type == cudaMemoryTypeDevice)) return;
  cudaGetLastError();
  staged_ = std::make_unique<Temp<std::int32_t>>(pool, n, stream);
  check_cuda(cudaMemcpyAsync(staged_->get(), ids, n * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync (token ids to the device)");
  ptr_ = staged_->get();
}

CudaBackendImpl::CudaBackendImpl(const CudaBackendConfig& config, std::unique_ptr<GemmEngine> gemm,
                                 std::unique_ptr<AttentionEngine> attention)
    : config_(config), gemm_(std::move(gemm)), attention_(std::move(attention)) {
  if (config_.compute != DType::F32 && config_.compute != DType::BF16)
    throw std::invalid_argument(std::string("cuda backend: compute precision ") + dtype_name(config_.compute) +
                                ": expected f32 or bf16");
  const std::string which = "cuda:" + std::to_string(config_.device);
  check_cuda(cudaSetDevice(config_.device), ("cudaSetDevice(" + std::to_string(config_.device) + ")").c_str());
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, config_.device), "cudaGetDeviceProperties");
  name_ = which + " (" + prop.name + (config_.compute == DType::BF16 ? ", bf16 compute" : "") +
          (config_.attention == AttentionImpl::Cudnn ? ", cuDNN attention" : "") + ")";
  check_cuda(cudaDeviceGetStreamPriorityRange(&priority_least_, &priority_greatest_),
             "cudaDeviceGetStreamPriorityRange");
  priorities_ = stream_priorities(priority_least_, priority_greatest_);
  device_memory_ = std::make_unique<DeviceMemory>(config_.device);
  scratch_ = std::make_unique<ScratchPool>(config_.device);
  if (config_.lane_sm_partition > 0) lane_partition_ = SmPartition::create(config_.device, config_.lane_sm_partition);
}

CudaBackendImpl::~CudaBackendImpl() = default;

cudaStream_t CudaBackendImpl::enter(Stream& s) const {
  check_cuda(cudaSetDevice(config_.device), "cudaSetDevice");
  return cuda_stream(s).handle();
}

void CudaBackendImpl::expect_device(const char* op, std::initializer_list<const void*> buffers) const {
  if (!config_.check_pointers) return;
  int index = 0;
  for (const void* p : buffers) {
    cudaPointerAttributes attr{};
    if (p && (cudaPointerGetAttributes(&attr, p) != cudaSuccess || attr.type != cudaMemoryTypeDevice))
      throw std::logic_error(std::string("CUDA backend: ") + op + ": buffer argument " + std::to_string(index) +
                             " is not device memory");
    ++index;
  }
}

double CudaBackendImpl::host_sum(const float* device, std::size_t n, cudaStream_t stream) const {
  const Temp<double> sum(*scratch_, 1, stream);
  cuda::sum_in_order(sum.get(), device, n, stream);
  double total = 0.0;
  check_cuda(cudaMemcpyAsync(&total, sum.get(), sizeof total, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (the loss sum to the host)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return total;
}

// ---- memory, streams, events ----

std::unique_ptr<Arena> CudaBackendImpl::create_arena(std::string name, std::size_t bytes, MemoryKind kind) {
  check_cuda(cudaSetDevice(config_.device), "cudaSetDevice");
  switch (kind) {
    case MemoryKind::Host: return std::make_unique<Arena>(std::move(name), bytes);
    case MemoryKind::PinnedHost: return std::make_unique<Arena>(std::move(name), bytes, pinned_memory_);
    case MemoryKind::Device: return std::make_unique<Arena>(std::move(name), bytes, *device_memory_);
    case MemoryKind::DevicePool: return create_pool_arena(std::move(name), bytes);
  }
  throw std::invalid_argument("CUDA backend: unknown memory kind");
}

std::unique_ptr<Arena> CudaBackendImpl::create_pool_arena(std::string name, std::size_t quota_bytes) {
  check_cuda(cudaSetDevice(config_.device), "cudaSetDevice");
  std::lock_guard lock(pools_mu_);
  pools_.push_back(std::make_unique<PoolMemory>(config_.device, quota_bytes));
  return std::make_unique<Arena>(std::move(name), quota_bytes, *pools_.back());
}

void CudaBackendImpl::copy(void* dst, const void* src, std::size_t bytes, Stream& stream) {
  const cudaStream_t h = enter(stream);
  if (dst == src || bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, h), "cudaMemcpyAsync");
}

void CudaBackendImpl::memset_zero(void* dst, std::size_t bytes, Stream& stream) {
  const cudaStream_t h = enter(stream);
  if (bytes == 0) return;
  check_cuda(cudaMemsetAsync(dst, 0, bytes, h), "cudaMemsetAsync");
}

std::unique_ptr<Stream> CudaBackendImpl::create_stream(StreamPriority priority) {
  check_cuda(cudaSetDevice(config_.device), "cudaSetDevice");
  const int value = priority == StreamPriority::High     ? priorities_.high
                    : priority == StreamPriority::Normal ? priorities_.normal
                                                         : priorities_.low;
  cudaStream_t handle = nullptr;
  if (priority == StreamPriority::Low && lane_partition_)
    handle = lane_partition_->create_stream(value);
  else
    check_cuda(cudaStreamCreateWithPriority(&handle, cudaStreamNonBlocking, value), "cudaStreamCreateWithPriority");
  return std::make_unique<CudaStream>(handle, priority, config_.gemm_workspace_bytes);
}

std::unique_ptr<Event> CudaBackendImpl::create_event() {
  check_cuda(cudaSetDevice(config_.device), "cudaSetDevice");
  return std::make_unique<CudaEvent>();
}

// Every op of the table, the Llama family's included (cuda_backend_llama.cpp), on fp32 buffers;
// on bf16 buffers what has_bf16_buffer says, except the MHA attention's probabilities under cuDNN
// (it saves fp32 softmax statistics instead).
bool CudaBackendImpl::supports(OpKind op, DType dtype) const {
  if (op == OpKind::Count) return false;
  if (dtype == DType::F32) return true;
  const bool mha = op == OpKind::AttentionForward || op == OpKind::AttentionBackward;
  if (dtype == DType::BF16 && mha && config_.attention == AttentionImpl::Cudnn) return false;
  return dtype == DType::BF16 && has_bf16_buffer(op, config_.compute);
}

CudaBackendStats CudaBackendImpl::stats() const {
  CudaBackendStats s;
  s.scratch_high_water = scratch_->used_high();
  s.lane_partition_sms = lane_partition_ ? lane_partition_->sm_count() : 0;
  s.priority_least = priority_least_;
  s.priority_greatest = priority_greatest_;
  s.unfused_epilogues = unfused_epilogues_.load();
  return s;
}

// ---- embedding ----

void CudaBackendImpl::embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                        int B, int T, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("embedding_forward", {out, wte, wpe});
  const DeviceInts ids(*scratch_, tokens, static_cast<std::size_t>(B) * T, h);
  cuda::embedding_forward<float>(out, ids.get(), wte, wpe, B, T, C, h);
}
void CudaBackendImpl::embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                                         int B, int T, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("embedding_backward", {dwte, dwpe, dout});
  const DeviceInts ids(*scratch_, tokens, static_cast<std::size_t>(B) * T, h);
  cuda::embedding_backward<float>(dwte, dwpe, dout, ids.get(), B, T, C, h);
}
void CudaBackendImpl::embedding_lookup_local(float* out, const std::int32_t* tokens, const float* wte, int N, int C,
                                             int v0, int vcount, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("embedding_lookup_local", {out, wte});
  const DeviceInts ids(*scratch_, tokens, static_cast<std::size_t>(N), h);
  cuda::embedding_lookup_local<float>(out, ids.get(), wte, N, C, v0, vcount, h);
}
void CudaBackendImpl::add_positions(float* out, const float* wpe, int B, int T, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("add_positions", {out, wpe});
  cuda::add_positions<float>(out, wpe, B, T, C, h);
}
void CudaBackendImpl::embedding_backward_local(float* dwte, float* dwpe, const float* dout,
                                               const std::int32_t* tokens, int B, int T, int C, int v0, int vcount,
                                               Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("embedding_backward_local", {dwte, dwpe, dout});
  const DeviceInts ids(*scratch_, tokens, static_cast<std::size_t>(B) * T, h);
  cuda::embedding_backward_local<float>(dwte, dwpe, dout, ids.get(), B, T, C, v0, vcount, h);
}

// ---- layernorm ----

void CudaBackendImpl::layernorm_forward(ActivationOut out, float* mean, float* rstd, const float* inp,
                                        const float* weight, const float* bias, int N, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("layernorm_forward", {out.data(), mean, rstd, inp, weight, bias});
  if (out.is_bf16())
    cuda::layernorm_forward<float, bf16>(reinterpret_cast<bf16*>(out.bf16), mean, rstd, inp, weight, bias, N, C, h);
  else
    cuda::layernorm_forward<float>(out.f32, mean, rstd, inp, weight, bias, N, C, h);
}
void CudaBackendImpl::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                         ActivationIn inp, const float* weight, const float* mean, const float* rstd,
                                         int N, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("layernorm_backward", {dinp, dweight, dbias, dout, inp.data(), weight, mean, rstd});
  const Fp32Input x(*scratch_, inp, count(N, C), h);
  const Temp<float> scratch(*scratch_, layernorm_backward_scratch_floats(N, C), h);
  cuda::layernorm_backward<float>(dinp, dweight, dbias, dout, x.get(), weight, mean, rstd, N, C, scratch.get(), h);
}
void CudaBackendImpl::layernorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight,
                                               const float* mean, const float* rstd, int N, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("layernorm_backward_input", {dinp, dout, inp.data(), weight, mean, rstd});
  const Fp32Input x(*scratch_, inp, count(N, C), h);
  cuda::layernorm_backward_input<float>(dinp, dout, x.get(), weight, mean, rstd, N, C, h);
}
void CudaBackendImpl::layernorm_backward_params(float* dweight, float* dbias, const float* dout, ActivationIn inp,
                                                const float* mean, const float* rstd, int N, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("layernorm_backward_params", {dweight, dbias, dout, inp.data(), mean, rstd});
  const Fp32Input x(*scratch_, inp, count(N, C), h);
  const Temp<float> scratch(*scratch_, layernorm_backward_scratch_floats(N, C), h);
  cuda::layernorm_backward_params<float>(dweight, dbias, dout, x.get(), mean, rstd, N, C, scratch.get(), h);
}

// ---- elementwise ----

void CudaBackendImpl::gelu_forward(ActivationOut out, const float* inp, std::size_t n, Stream& s) {
  expect_device("gelu_forward", {out.data(), inp});
  into_activation(out, n, s, [&](float* y) { cuda::gelu_forward<float>(y, inp, n, enter(s)); });
}
void CudaBackendImpl::gelu_backward(float* dinp, ActivationIn inp, const float* dout, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("gelu_backward", {dinp, inp.data(), dout});
  const Fp32Input x(*scratch_, inp, n, h);
  cuda::gelu_backward<float>(dinp, x.get(), dout, n, h);
}
void CudaBackendImpl::add(float* out, const float* a, const float* b, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("add", {out, a, b});
  cuda::add_forward<float>(out, a, b, n, h);
}
void CudaBackendImpl::add_inplace(float* acc, const float* x, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("add_inplace", {acc, x});
  cuda::add_inplace<float>(acc, x, n, h);
}
void CudaBackendImpl::add_bias(float* out, const float* bias, int N, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("add_bias", {out, bias});
  cuda::add_bias<float>(out, bias, N, C, h);
}
void CudaBackendImpl::scale(float* x, float factor, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("scale", {x});
  cuda::scale_inplace<float>(x, factor, n, h);
}
// bf16 storage: a bf16 buffer is std::uint16_t above runtime/, __nv_bfloat16 (the same two bytes) here.
void CudaBackendImpl::cast_to_bf16(std::uint16_t* out, const float* in, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("cast_to_bf16", {out, in});
  cuda::convert_from_float<cuda::bf16>(reinterpret_cast<cuda::bf16*>(out), in, n, h);
}
void CudaBackendImpl::cast_from_bf16(float* out, const std::uint16_t* in, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("cast_from_bf16", {out, in});
  cuda::convert_to_float<cuda::bf16>(out, reinterpret_cast<const cuda::bf16*>(in), n, h);
}
void CudaBackendImpl::round_to_bf16(float* x, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("round_to_bf16", {x});
  cuda::round_to_bf16(x, n, h);
}
double CudaBackendImpl::sum_squares(const float* x, std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("sum_squares", {x});
  const Temp<double> partial(*scratch_, sum_squares_scratch_doubles(n), h), result(*scratch_, 1, h);
  cuda::sum_squares<float>(result.get(), x, n, partial.get(), h);
  double value = 0.0;
  check_cuda(cudaMemcpyAsync(&value, result.get(), sizeof value, cudaMemcpyDeviceToHost, h),
             "cudaMemcpyAsync (sum of squares to the host)");
  check_cuda(cudaStreamSynchronize(h), "cudaStreamSynchronize");
  return value;
}

void CudaBackendImpl::sum_squares_each(double* sums, const float* const* xs, const std::size_t* ns,
                                       std::size_t count, Stream& s) {
  const cudaStream_t h = enter(s);
  if (count == 0) return;
  std::size_t partials = 1;
  for (std::size_t i = 0; i < count; ++i) {
    expect_device("sum_squares_each", {xs[i]});
    partials = std::max(partials, sum_squares_scratch_doubles(ns[i]));
  }
  // One partial buffer for every slice: the launches run in the stream's order, each slice's
  // partials summed before the next slice overwrites them. The same kernels as sum_squares.
  const Temp<double> partial(*scratch_, partials, h), results(*scratch_, count, h);
  for (std::size_t i = 0; i < count; ++i) cuda::sum_squares<float>(results.get() + i, xs[i], ns[i], partial.get(), h);
  check_cuda(cudaMemcpyAsync(sums, results.get(), count * sizeof(double), cudaMemcpyDeviceToHost, h),
             "cudaMemcpyAsync (sums of squares to the host)");
  check_cuda(cudaStreamSynchronize(h), "cudaStreamSynchronize");
}

}  // namespace pipelane::cuda
