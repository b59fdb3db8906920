// The CUDA backend's composed ops: nn.Linear through GEMMs (bias in cuBLASLt's epilogue, its
// gradient by an own kernel: deterministic column sums), causal attention as strided-batched
// GEMMs around own permute and softmax kernels, the KV-cache attention, and the tied LM head with
// cross-entropy one block of rows at a time (never all logits).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/backend/cuda_check.h"
#include "runtime/cuda/cuda_ops.h"

namespace pipelane::cuda {

namespace {

constexpr DataType kF32 = DataType::F32;

// Rows of logits the fused head holds at once: one block of at most 128 MiB, as the CPU head.
int head_chunk_rows(int N, int width) {
  constexpr std::size_t kLogitsBlockBytes = std::size_t{128} << 20;
  const std::size_t by_bytes = kLogitsBlockBytes / (static_cast<std::size_t>(std::max(width, 1)) * sizeof(float));
  const int rows = static_cast<int>(std::max<std::size_t>(16, by_bytes / 16 * 16));
  return std::max(1, std::min(N, rows));
}

}  // namespace

void CudaBackendImpl::gemm(const GemmCall& g, Stream& s) {
  const CudaStream& cs = cuda_stream(s);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  gemm_->run(g, cs.workspace(), cs.workspace_bytes(), cs.handle());
}

// ---- matmul ----

void CudaBackendImpl::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                                     int C, int OC, Stream& s) {
  enter(s);
  expect_device("matmul_forward", {out, inp, weight, bias});
  gemm(matmul_forward_gemm(out, inp, weight, bias, N, C, OC, kF32), s);
}
void CudaBackendImpl::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                      const float* weight, int N, int C, int OC, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("matmul_backward", {dinp, dweight, dbias, dout, inp, weight});
  if (dinp) gemm(matmul_backward_input_gemm(dinp, dout, weight, N, C, OC, kF32), s);
  gemm(matmul_backward_weight_gemm(dweight, dout, inp, N, C, OC, kF32), s);
  if (dbias) {
    const Temp<float> scratch(*scratch_, matmul_backward_bias_scratch_floats(N, OC), h);
    cuda::matmul_backward_bias<float>(dbias, dout, N, OC, scratch.get(), h);
  }
}
void CudaBackendImpl::matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C, int OC,
                                            Stream& s) {
  enter(s);
  expect_device("matmul_backward_input", {dinp, dout, weight});
  gemm(matmul_backward_input_gemm(dinp, dout, weight, N, C, OC, kF32), s);
}

// ---- attention ----

void CudaBackendImpl::attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                                        Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_forward", {out, att, qkv});
  const int hs = C / NH, BNH = B * NH;
  const std::size_t n = static_cast<std::size_t>(B) * T * C;
  const Temp<float> qkv_heads(*scratch_, 3 * n, h), y(*scratch_, n, h);
  float *q = qkv_heads.get(), *k = q + n, *v = k + n;
  attention_permute_qkv<float>(q, k, v, qkv, B, T, C, NH, h);
  // The scores go straight into att, and the softmax runs in place (it reads a row before any
  // lane writes it): no second [BNH, T, T] buffer.
  gemm(attention_scores_gemm(att, q, k, BNH, T, hs, kF32), s);
  attention_softmax_forward<float>(att, att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T, h);
  gemm(attention_values_gemm(y.get(), att, v, BNH, T, hs, kF32), s);
  attention_causal_fixup<float>(y.get(), att, v, false, BNH, T, hs, h);
  attention_unpermute<float>(out, y.get(), B, T, C, NH, h);
}

void CudaBackendImpl::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                                         int T, int C, int NH, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_backward", {dqkv, dout, qkv, att});
  const int hs = C / NH, BNH = B * NH;
  const std::size_t n = static_cast<std::size_t>(B) * T * C, na = static_cast<std::size_t>(BNH) * T * T;
  const Temp<float> heads(*scratch_, 3 * n, h), dheads(*scratch_, 3 * n, h), dy(*scratch_, n, h),
      datt(*scratch_, na, h);
  float *q = heads.get(), *k = q + n, *v = k + n;
  float *dq = dheads.get(), *dk = dq + n, *dv = dk + n;
  attention_permute_qkv<float>(q, k, v, qkv, B, T, C, NH, h);
  attention_unpermute_backward<float>(dy.get(), dout, B, T, C, NH, h);
  for (const GemmCall& g : attention_values_backward_gemms(datt.get(), dv, dy.get(), att, v, BNH, T, hs, kF32))
    gemm(g, s);
  attention_causal_fixup<float>(dv, att, dy.get(), true, BNH, T, hs, h);
  attention_softmax_backward<float>(datt.get(), datt.get(), att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T, h);
  for (const GemmCall& g : attention_scores_backward_gemms(dq, dk, datt.get(), q, k, BNH, T, hs, kF32)) gemm(g, s);
  attention_causal_fixup<float>(dq, datt.get(), k, false, BNH, T, hs, h);
  attention_causal_fixup<float>(dk, datt.get(), q, true, BNH, T, hs, h);
  attention_permute_qkv_backward<float>(dqkv, dq, dk, dv, B, T, C, NH, h);
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

void CudaBackendImpl::lm_head_logits(float* logits, const float* x, const float* wte, int N, int C, int Vp,
                                     Stream& s) {
  enter(s);
  expect_device("lm_head_logits", {logits, x, wte});
  gemm(matmul_forward_gemm(logits, x, wte, nullptr, N, C, Vp, kF32), s);
}

std::size_t CudaBackendImpl::lm_head_scratch_floats(int N, int Vp) const {
  return static_cast<std::size_t>(head_chunk_rows(N, Vp)) * Vp;
}

double CudaBackendImpl::lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x, const float* wte,
                                              const std::int32_t* targets, int N, int C, int V, int Vp,
                                              float grad_scale, float* scratch, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("lm_head_cross_entropy", {losses, dx, dwte, x, wte, scratch});
  const DeviceInts tgt(*scratch_, targets, static_cast<std::size_t>(N), h);
  const int R = head_chunk_rows(N, Vp);
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const float* xc = x + static_cast<std::size_t>(r0) * C;
    gemm(matmul_forward_gemm(scratch, xc, wte, nullptr, rows, C, Vp, kF32), s);
    cross_entropy_chunk<float>(losses + r0, scratch, tgt.get() + r0, rows, V, Vp, grad_scale, dx != nullptr, h);
    if (dx) {
      gemm(matmul_backward_input_gemm(dx + static_cast<std::size_t>(r0) * C, scratch, wte, rows, C, Vp, kF32), s);
      gemm(matmul_backward_weight_gemm(dwte, scratch, xc, rows, C, Vp, kF32), s);
    }
  }
  return host_sum(losses, static_cast<std::size_t>(N), h);
}

std::size_t CudaBackendImpl::lm_head_vocab_parallel_scratch_floats(int N, int vocab_count) const {
  const std::size_t R = static_cast<std::size_t>(head_chunk_rows(N, vocab_count));
  return R * static_cast<std::size_t>(vocab_count) + 3 * R;
}

double CudaBackendImpl::lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte, const float* x,
                                                             const float* wte, const std::int32_t* targets, int N,
                                                             int C, int V, int vocab_begin, int vocab_count,
                                                             float grad_scale, float* scratch,
                                                             const GroupReduce& reduce, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("lm_head_cross_entropy_vocab_parallel", {losses, dx, dwte, x, wte, scratch});
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
    const float* xc = x + static_cast<std::size_t>(r0) * C;
    const std::int32_t* tc = tgt.get() + r0;
    gemm(matmul_forward_gemm(logits, xc, wte, nullptr, rows, C, Vl, kF32), s);
    cross_entropy_chunk_row_max<float>(rowmax, logits, rows, Vl, valid, h);
    reduce.max(rowmax, static_cast<std::size_t>(rows));
    cross_entropy_chunk_row_sums<float>(rowsum, rowtgt, logits, rowmax, tc, rows, Vl, valid, vocab_begin, h);
    reduce.sum(rowsum, 2 * static_cast<std::size_t>(rows));
    cross_entropy_chunk_finish<float>(losses + r0, logits, rowmax, rowsum, rowtgt, tc, rows, Vl, valid, vocab_begin,
                                      grad_scale, dx != nullptr, h);
    if (dx) {
      float* dxc = dx + static_cast<std::size_t>(r0) * C;
      gemm(matmul_backward_input_gemm(dxc, logits, wte, rows, C, Vl, kF32), s);
      reduce.sum(dxc, static_cast<std::size_t>(rows) * C);
      gemm(matmul_backward_weight_gemm(dwte, logits, xc, rows, C, Vl, kF32), s);
    }
  }
  return host_sum(losses, static_cast<std::size_t>(N), h);
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

std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendConfig& config, std::unique_ptr<GemmEngine> gemm) {
  if (!gemm) throw std::invalid_argument("make_cuda_backend: no GEMM engine");
  return std::make_unique<CudaBackendImpl>(config, std::move(gemm));
}

}  // namespace pipelane::cuda
