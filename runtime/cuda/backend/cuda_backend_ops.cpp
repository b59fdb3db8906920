// The CUDA backend's composed ops: nn.Linear through GEMMs (bias in cuBLASLt's epilogue, its
// gradient by an own kernel: deterministic column sums), causal attention as strided-batched
// GEMMs around own permute and softmax kernels, the KV-cache attention, and the tied LM head with
// cross-entropy one block of rows at a time (never all logits).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/backend/cuda_check.h"
#include "runtime/cuda/cuda_ops.h"

namespace pipelane::cuda {

namespace {

constexpr DataType kF32 = DataType::F32;

template <typename X>
constexpr DataType data_type() {
  return std::is_same_v<X, float> ? DataType::F32 : DataType::BF16;
}

}  // namespace

int head_chunk_rows(int N, int width) {
  constexpr std::size_t kLogitsBlockBytes = std::size_t{128} << 20;
  const std::size_t by_bytes = kLogitsBlockBytes / (static_cast<std::size_t>(std::max(width, 1)) * sizeof(float));
  const int rows = static_cast<int>(std::max<std::size_t>(16, by_bytes / 16 * 16));
  return std::max(1, std::min(N, rows));
}

bool CudaBackendImpl::try_gemm(const GemmCall& g, Stream& s) {
  const CudaStream& cs = cuda_stream(s);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return true;
  return gemm_->run(g, cs.workspace(), cs.workspace_bytes(), cs.handle());
}

void CudaBackendImpl::gemm(const GemmCall& g, Stream& s) {
  if (try_gemm(g, s)) return;
  const bool dense_d = g.c.ld == g.m && (g.batch == 1 || g.c.batch_stride == std::int64_t{g.m} * g.n);
  if (g.epilogue == Epilogue::Bias && g.bias_type == g.c.type && dense_d) {
    // The same product without the epilogue, then the bias added to each row of the row-major
    // [n, m] result (column-major D is m x n): what the epilogue computes, in two kernels.
    GemmCall plain = g;
    plain.epilogue = Epilogue::None;
    plain.bias = nullptr;
    if (try_gemm(plain, s)) {
      const cudaStream_t h = cuda_stream(s).handle();
      ++unfused_epilogues_;
      if (g.c.type == DataType::F32)
        cuda::add_bias<float>(static_cast<float*>(g.d), static_cast<const float*>(g.bias), g.n * g.batch, g.m, h);
      else
        cuda::add_bias<bf16>(static_cast<bf16*>(g.d), static_cast<const bf16*>(g.bias), g.n * g.batch, g.m, h);
      return;
    }
  }
  throw std::runtime_error(std::string("cuBLASLt: no algorithm for a ") + std::to_string(g.m) + "x" +
                           std::to_string(g.n) + "x" + std::to_string(g.k) + " GEMM (batch " +
                           std::to_string(g.batch) + ", " + to_string(g.a.type) + " operands, " +
                           to_string(g.c.type) + " output) with epilogue " + to_string(g.epilogue));
}

// ---- matmul ----

template <typename X>
void CudaBackendImpl::matmul_forward_t(X* out, const X* inp, const X* weight, const X* bias, int N, int C, int OC,
                                       Stream& s) {
  enter(s);
  expect_device("matmul_forward", {out, inp, weight, bias});
  gemm(matmul_forward_gemm(out, inp, weight, bias, N, C, OC, data_type<X>()), s);
}

template <typename X>
void CudaBackendImpl::matmul_backward_t(X* dinp, float* dweight, float* dbias, const X* dout, const X* inp,
                                        const X* weight, int N, int C, int OC, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("matmul_backward", {dinp, dweight, dbias, dout, inp, weight});
  if (dinp) gemm(matmul_backward_input_gemm(dinp, dout, weight, N, C, OC, data_type<X>()), s);
  gemm(matmul_backward_weight_gemm(dweight, dout, inp, N, C, OC, data_type<X>()), s);
  if (dbias) {
    const Temp<float> scratch(*scratch_, matmul_backward_bias_scratch_floats(N, OC), h);
    cuda::matmul_backward_bias<X>(dbias, dout, N, OC, scratch.get(), h);
  }
}

void CudaBackendImpl::matmul_forward(float* out, ActivationIn inp, GemmWeight weight, const float* bias, int N,
                                     int C, int OC, Stream& s) {
  if (bf16_compute()) return matmul_forward_autocast(out, inp, weight, bias, N, C, OC, s);
  matmul_forward_t(out, fp32_input(inp, "matmul_forward"), fp32_weight(weight, "matmul_forward"), bias, N, C, OC, s);
}
void CudaBackendImpl::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, ActivationIn inp,
                                      GemmWeight weight, int N, int C, int OC, Stream& s) {
  if (bf16_compute()) return matmul_backward_autocast(dinp, dweight, dbias, dout, inp, weight, N, C, OC, s);
  matmul_backward_t(dinp, dweight, dbias, dout, fp32_input(inp, "matmul_backward"),
                    fp32_weight(weight, "matmul_backward"), N, C, OC, s);
}
void CudaBackendImpl::matmul_backward_input(float* dinp, const float* dout, GemmWeight weight, int N, int C, int OC,
                                            Stream& s) {
  if (bf16_compute()) return matmul_backward_input_autocast(dinp, dout, weight, N, C, OC, s);
  enter(s);
  const float* w = fp32_weight(weight, "matmul_backward_input");
  expect_device("matmul_backward_input", {dinp, dout, w});
  gemm(matmul_backward_input_gemm(dinp, dout, w, N, C, OC, kF32), s);
}

// ---- attention ----

template <typename X>
void CudaBackendImpl::attention_forward_t(X* out, X* att, const X* qkv, int B, int T, int C, int NH, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_forward", {out, att, qkv});
  const int hs = C / NH, BNH = B * NH;
  const std::size_t n = static_cast<std::size_t>(B) * T * C;
  const Temp<X> qkv_heads(*scratch_, 3 * n, h), y(*scratch_, n, h);
  X *q = qkv_heads.get(), *k = q + n, *v = k + n;
  attention_permute_qkv<X>(q, k, v, qkv, B, T, C, NH, h);
  // The scores go straight into att, and the softmax runs in place (it reads a row before any
  // lane writes it): no second [BNH, T, T] buffer.
  gemm(attention_scores_gemm(att, q, k, BNH, T, hs, data_type<X>()), s);
  attention_softmax_forward<X>(att, att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T, h);
  gemm(attention_values_gemm(y.get(), att, v, BNH, T, hs, data_type<X>()), s);
  attention_causal_fixup<X>(y.get(), att, v, false, BNH, T, hs, h);
  attention_unpermute<X>(out, y.get(), B, T, C, NH, h);
}

template <typename X>
void CudaBackendImpl::attention_backward_t(X* dqkv, const X* dout, const X* qkv, const X* att, int B, int T, int C,
                                           int NH, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_backward", {dqkv, dout, qkv, att});
  const int hs = C / NH, BNH = B * NH;
  const DataType dt = data_type<X>();
  const std::size_t n = static_cast<std::size_t>(B) * T * C, na = static_cast<std::size_t>(BNH) * T * T;
  const Temp<X> heads(*scratch_, 3 * n, h), dheads(*scratch_, 3 * n, h), dy(*scratch_, n, h), datt(*scratch_, na, h);
  X *q = heads.get(), *k = q + n, *v = k + n;
  X *dq = dheads.get(), *dk = dq + n, *dv = dk + n;
  attention_permute_qkv<X>(q, k, v, qkv, B, T, C, NH, h);
  attention_unpermute_backward<X>(dy.get(), dout, B, T, C, NH, h);
  for (const GemmCall& g : attention_values_backward_gemms(datt.get(), dv, dy.get(), att, v, BNH, T, hs, dt)) gemm(g, s);
  attention_causal_fixup<X>(dv, att, dy.get(), true, BNH, T, hs, h);
  attention_softmax_backward<X>(datt.get(), datt.get(), att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T, h);
  for (const GemmCall& g : attention_scores_backward_gemms(dq, dk, datt.get(), q, k, BNH, T, hs, dt)) gemm(g, s);
  attention_causal_fixup<X>(dq, datt.get(), k, false, BNH, T, hs, h);
  attention_causal_fixup<X>(dk, datt.get(), q, true, BNH, T, hs, h);
  attention_permute_qkv_backward<X>(dqkv, dq, dk, dv, B, T, C, NH, h);
}

std::size_t CudaBackendImpl::attention_saved_floats(int B, int T, int C, int NH) const {
  if (config_.attention == AttentionImpl::Cudnn) return static_cast<std::size_t>(B) * NH * T;
  return Backend::attention_saved_floats(B, T, C, NH);
}
void CudaBackendImpl::expect_bf16_probabilities(OpKind op) const {
  if (!supports(op, DType::BF16))
    throw std::invalid_argument(name() + ": " + op_kind_name(op) +
                                " got bf16 probabilities; this attention saves fp32 statistics (cuDNN's)");
}
void CudaBackendImpl::probabilities_into_bf16(OpKind op, std::uint16_t* att, std::size_t n, Stream& s,
                                              const std::function<void(float*)>& run) {
  expect_bf16_probabilities(op);
  expect_device(op_kind_name(op), {att});
  into_activation(ActivationOut::of_bf16(att), n, s, run);
}
void CudaBackendImpl::into_activation(ActivationOut out, std::size_t n, Stream& s,
                                      const std::function<void(float*)>& run) {
  if (!out.is_bf16()) return run(out.f32);
  const cudaStream_t h = enter(s);
  const Temp<float> value(*scratch_, n, h);
  run(value.get());
  convert_from_float<bf16>(reinterpret_cast<bf16*>(out.bf16), value.get(), n, h);
}
void CudaBackendImpl::probabilities_from_bf16(OpKind op, const std::uint16_t* att, std::size_t n, Stream& s,
                                              const std::function<void(const float*)>& run) {
  expect_bf16_probabilities(op);
  expect_device(op_kind_name(op), {att});
  const Fp32Input p(*scratch_, ActivationIn::of_bf16(att), n, enter(s));
  run(p.get());
}

void CudaBackendImpl::attention_forward(ActivationOut output, ActivationOut probabilities, ActivationIn qkv_in, int B,
                                        int T, int C, int NH, Stream& s) {
  const Fp32Input qkv32(*scratch_, qkv_in, count(B * T, 3 * C), enter(s));  // a bf16 qkv widened for the fp32 op
  const float* qkv = qkv32.get();
  if (output.is_bf16())  // the fp32 output on a temporary, rounded after (into_activation)
    return into_activation(output, count(B * T, C), s, [&](float* out) {
      attention_forward(out, probabilities, qkv, B, T, C, NH, s);
    });
  float* out = output.f32;
  if (probabilities.is_bf16())
    return probabilities_into_bf16(OpKind::AttentionForward, probabilities.bf16, attention_saved_floats(B, T, C, NH), s,
                                   [&](float* att) { attention_forward(out, att, qkv, B, T, C, NH, s); });
  float* att = probabilities.f32;
  if (config_.attention == AttentionImpl::Cudnn) return attention_forward_cudnn(out, att, qkv, B, T, C, NH, s);
  if (bf16_compute()) return attention_forward_autocast(out, att, qkv, B, T, C, NH, s);
  attention_forward_t(out, att, qkv, B, T, C, NH, s);
}
void CudaBackendImpl::attention_backward(float* dqkv, const float* dout, ActivationIn qkv_in, ActivationIn output,
                                         ActivationIn probabilities, int B, int T, int C, int NH, Stream& s) {
  const Fp32Input qkv32(*scratch_, qkv_in, count(B * T, 3 * C), enter(s));  // a bf16 qkv widened for the fp32 op
  const float* qkv = qkv32.get();
  // Only cuDNN's backward reads the output: a bf16 one is widened for it (Fp32Input), else unread.
  const bool read = config_.attention == AttentionImpl::Cudnn;
  const Fp32Input widened(*scratch_, read ? output : ActivationIn(nullptr), count(B * T, C), enter(s));
  const float* out = read ? widened.get() : output.f32;
  if (probabilities.is_bf16())
    return probabilities_from_bf16(OpKind::AttentionBackward, probabilities.bf16, attention_saved_floats(B, T, C, NH),
                                   s, [&](const float* att) {
                                     attention_backward(dqkv, dout, qkv, out, att, B, T, C, NH, s);
                                   });
  const float* att = probabilities.f32;
  if (config_.attention == AttentionImpl::Cudnn)
    return attention_backward_cudnn(dqkv, dout, qkv, out, att, B, T, C, NH, s);
  if (bf16_compute()) return attention_backward_autocast(dqkv, dout, qkv, att, B, T, C, NH, s);
  attention_backward_t(dqkv, dout, qkv, att, B, T, C, NH, s);
}

void CudaBackendImpl::attention_forward_kv(float* out, float* scores, const float* qkv, float* k_cache,
                                           float* v_cache, int past, int n, int C, int NH, Stream& s) {
  // The kernel's online softmax needs no scores buffer: `scores` is left as it is.
  (void)scores;
  const cudaStream_t h = enter(s);
  expect_device("attention_forward_kv", {out, qkv, k_cache, v_cache});
  if (n <= 0) return;
  const std::size_t row = static_cast<std::size_t>(C) * sizeof(float);
  const std::size_t at = static_cast<std::size_t>(past) * C;
  // Append this call's keys and values ([n, C] slices of the fused [n, 3C] rows) to the caches.
  check_cuda(cudaMemcpy2DAsync(k_cache + at, row, qkv + C, 3 * row, row, n, cudaMemcpyDeviceToDevice, h),
             "cudaMemcpy2DAsync (keys to the cache)");
  check_cuda(cudaMemcpy2DAsync(v_cache + at, row, qkv + 2 * C, 3 * row, row, n, cudaMemcpyDeviceToDevice, h),
             "cudaMemcpy2DAsync (values to the cache)");
  attention_kv_cache_forward<float>(out, qkv, 3 * C, k_cache, v_cache, C, n, past, C, NH, h);
}

// ---- the tied LM head ----

void CudaBackendImpl::lm_head_logits(float* logits, const float* x, GemmWeight wte, int N, int C, int Vp,
                                     Stream& s) {
  if (bf16_compute()) return lm_head_logits_autocast(logits, x, wte, N, C, Vp, s);
  enter(s);
  const float* w = fp32_weight(wte, "lm_head_logits");
  expect_device("lm_head_logits", {logits, x, w});
  gemm(matmul_forward_gemm(logits, x, w, nullptr, N, C, Vp, kF32), s);
}

std::size_t CudaBackendImpl::lm_head_scratch_floats(int N, int Vp) const {
  return static_cast<std::size_t>(head_chunk_rows(N, Vp)) * Vp;
}

template <typename X>
double CudaBackendImpl::lm_head_cross_entropy_t(float* losses, X* dx, float* dwte, const X* x, const X* wte,
                                                const std::int32_t* targets, int N, int C, int V, int Vp,
                                                float grad_scale, X* scratch, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("lm_head_cross_entropy", {losses, dx, dwte, x, wte, scratch});
  const DataType dt = data_type<X>();
  const DeviceInts tgt(*scratch_, targets, static_cast<std::size_t>(N), h);
  const int R = head_chunk_rows(N, Vp);
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const X* xc = x + static_cast<std::size_t>(r0) * C;
    gemm(matmul_forward_gemm(scratch, xc, wte, nullptr, rows, C, Vp, dt), s);
    cross_entropy_chunk<X>(losses + r0, scratch, tgt.get() + r0, rows, V, Vp, grad_scale, dx != nullptr, h);
    if (dx) {
      gemm(matmul_backward_input_gemm(dx + static_cast<std::size_t>(r0) * C, scratch, wte, rows, C, Vp, dt), s);
      gemm(matmul_backward_weight_gemm(dwte, scratch, xc, rows, C, Vp, dt), s);
    }
  }
  return host_sum(losses, static_cast<std::size_t>(N), h);
}

double CudaBackendImpl::lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x, GemmWeight wte,
                                              const std::int32_t* targets, int N, int C, int V, int Vp,
                                              float grad_scale, float* scratch, Stream& s) {
  if (bf16_compute())
    return lm_head_cross_entropy_autocast(losses, dx, dwte, x, wte, targets, N, C, V, Vp, grad_scale, scratch, s);
  return lm_head_cross_entropy_t(losses, dx, dwte, x, fp32_weight(wte, "lm_head_cross_entropy"), targets, N, C, V, Vp,
                                 grad_scale, scratch, s);
}

std::size_t CudaBackendImpl::lm_head_vocab_parallel_scratch_floats(int N, int vocab_count) const {
  const std::size_t R = static_cast<std::size_t>(head_chunk_rows(N, vocab_count));
  return R * static_cast<std::size_t>(vocab_count) + 3 * R;
}

template <typename O>
double CudaBackendImpl::lm_head_vocab_parallel_t(float* losses, float* dx, float* dwte, const O* x, const O* wte,
                                                 const std::int32_t* targets, int N, int C, int V, int vocab_begin,
                                                 int vocab_count, float grad_scale, float* scratch,
                                                 const GroupReduce& reduce, Stream& s) {
  const cudaStream_t h = enter(s);
  constexpr bool kBf16 = std::is_same_v<O, bf16>;
  const GemmTypes types = kBf16 ? kAutocast : GemmTypes(kF32);
  const DeviceInts tgt(*scratch_, targets, static_cast<std::size_t>(N), h);
  const int Vl = vocab_count;
  const int valid = std::max(0, std::min(Vl, V - vocab_begin));  // columns that are real tokens
  const int R = head_chunk_rows(N, Vl);
  float* logits = scratch;
  float* rowmax = scratch + static_cast<std::size_t>(R) * Vl;
  float* rowsum = rowmax + R;
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    // The row sums and the target logits next to each other: one all-reduce of 2 * rows floats.
    float* rowtgt = rowsum + rows;
    const O* xc = x + static_cast<std::size_t>(r0) * C;
    const std::int32_t* tc = tgt.get() + r0;
    gemm(matmul_forward_gemm(logits, xc, wte, nullptr, rows, C, Vl, types), s);
    cross_entropy_chunk_row_max<float>(rowmax, logits, rows, Vl, valid, h);
    reduce.max(rowmax, static_cast<std::size_t>(rows));
    cross_entropy_chunk_row_sums<float>(rowsum, rowtgt, logits, rowmax, tc, rows, Vl, valid, vocab_begin, h);
    reduce.sum(rowsum, 2 * static_cast<std::size_t>(rows));
    cross_entropy_chunk_finish<float>(losses + r0, logits, rowmax, rowsum, rowtgt, tc, rows, Vl, valid, vocab_begin,
                                      grad_scale, dx != nullptr, h);
    if (dx) {
      float* dxc = dx + static_cast<std::size_t>(r0) * C;
      const std::size_t n = static_cast<std::size_t>(rows) * Vl;
      const std::unique_ptr<Bf16Copy> copy = kBf16 ? std::make_unique<Bf16Copy>(*scratch_, logits, n, h) : nullptr;
      const void* dlogits = kBf16 ? static_cast<const void*>(copy->get()) : logits;
      gemm(matmul_backward_input_gemm(dxc, dlogits, wte, rows, C, Vl, types), s);
      reduce.sum(dxc, static_cast<std::size_t>(rows) * C);
      gemm(matmul_backward_weight_gemm(dwte, dlogits, xc, rows, C, Vl, types), s);
    }
  }
  return host_sum(losses, static_cast<std::size_t>(N), h);
}

double CudaBackendImpl::lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte, const float* x,
                                                             GemmWeight wte, const std::int32_t* targets, int N,
                                                             int C, int V, int vocab_begin, int vocab_count,
                                                             float grad_scale, float* scratch,
                                                             const GroupReduce& reduce, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("lm_head_cross_entropy_vocab_parallel", {losses, dx, dwte, x, wte.data(), scratch});
  if (!bf16_compute())
    return lm_head_vocab_parallel_t(losses, dx, dwte, x, fp32_weight(wte, "lm_head_cross_entropy_vocab_parallel"),
                                    targets, N, C, V, vocab_begin, vocab_count, grad_scale, scratch, reduce, s);
  const Bf16Copy x16(*scratch_, x, static_cast<std::size_t>(N) * C, h);
  const Bf16Operand w16(*scratch_, wte, static_cast<std::size_t>(vocab_count) * C, h);
  return lm_head_vocab_parallel_t(losses, dx, dwte, x16.get(), w16.get(), targets, N, C, V, vocab_begin, vocab_count,
                                  grad_scale, scratch, reduce, s);
}

// ---- a measured peak ----

double CudaBackendImpl::measure_matmul_gflops(int n, int reps) {
  if (n <= 0 || reps <= 0) return 0.0;
  const std::unique_ptr<Stream> stream = create_stream(StreamPriority::High);
  const cudaStream_t h = cuda_stream(*stream).handle();
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  const Temp<float> a(*scratch_, nn, h), b(*scratch_, nn, h), c(*scratch_, nn, h);
  for (const float* p : {a.get(), b.get(), c.get()})
    check_cuda(cudaMemsetAsync(const_cast<float*>(p), 0, nn * sizeof(float), h), "cudaMemsetAsync");
  const GemmCall g = matmul_forward_gemm(c.get(), a.get(), b.get(), nullptr, n, n, n, kF32);
  gemm(g, *stream);  // warm-up: the heuristic and the first launch
  CudaEvent start, end;
  double best_s = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps; ++r) {
    start.record(*stream);
    gemm(g, *stream);
    end.record(*stream);
    end.synchronize();
    best_s = std::min(best_s, end.elapsed_ms_since(start) / 1e3);
  }
  stream->synchronize();
  return best_s > 0 ? 2.0 * n * nn / best_s / 1e9 : 0.0;
}

template <typename X>
void CudaBackendImpl::adamw_update_t(float* param, const float* grad, float* m, float* v, std::size_t n,
                                     const AdamWParams& hp, float grad_scale, X* param_copy, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("adamw_update", {param, grad, m, v, param_copy});
  cuda::adamw_update<X>(param, grad, m, v, n, hp, grad_scale, param_copy, h);
}

void CudaBackendImpl::adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                                   const AdamWParams& hp, float grad_scale, Stream& s) {
  adamw_update_t<float>(param, grad, m, v, n, hp, grad_scale, nullptr, s);
}

// ---- bf16 ----

void CudaBf16OpsImpl::matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N, int C,
                                     int OC, Stream& s) {
  b_.matmul_forward_t(out, inp, weight, bias, N, C, OC, s);
}
void CudaBf16OpsImpl::matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                      const bf16* weight, int N, int C, int OC, Stream& s) {
  b_.matmul_backward_t(dinp, dweight, dbias, dout, inp, weight, N, C, OC, s);
}
void CudaBf16OpsImpl::attention_forward(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH,
                                        Stream& s) {
  b_.attention_forward_t(out, att, qkv, B, T, C, NH, s);
}
void CudaBf16OpsImpl::attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int B, int T,
                                         int C, int NH, Stream& s) {
  b_.attention_backward_t(dqkv, dout, qkv, att, B, T, C, NH, s);
}
double CudaBf16OpsImpl::lm_head_cross_entropy(float* losses, bf16* dx, float* dwte, const bf16* x, const bf16* wte,
                                              const std::int32_t* targets, int N, int C, int V, int Vp,
                                              float grad_scale, bf16* scratch, Stream& s) {
  return b_.lm_head_cross_entropy_t(losses, dx, dwte, x, wte, targets, N, C, V, Vp, grad_scale, scratch, s);
}
void CudaBf16OpsImpl::adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                                   const AdamWParams& h, float grad_scale, bf16* param_copy, Stream& s) {
  b_.adamw_update_t(param, grad, m, v, n, h, grad_scale, param_copy, s);
}

std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendConfig& config, std::unique_ptr<GemmEngine> gemm,
                                               std::unique_ptr<AttentionEngine> attention) {
  if (!gemm) throw std::invalid_argument("make_cuda_backend: no GEMM engine");
  if (config.attention == AttentionImpl::Cudnn && !attention)
    throw std::invalid_argument("make_cuda_backend: attention = cudnn without an attention engine");
  return std::make_unique<CudaBackendImpl>(config, std::move(gemm), std::move(attention));
}
std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendConfig& config, std::unique_ptr<GemmEngine> gemm) {
  return make_cuda_backend(config, std::move(gemm), nullptr);
}

}  // namespace pipelane::cuda
