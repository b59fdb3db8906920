// bf16 compute on fp32 storage (runtime/backend.h; CudaBackendConfig::compute = BF16): the
// matmul family as in cuda_backend_ops.cpp, but every GEMM reads bf16 copies of its operands,
// made in op temporaries by convert_from_float, and writes fp32 (cuBLASLt: A/B bf16, C/D fp32,
// compute 32F). The kernels around the GEMMs (softmax, cross-entropy, permutes, bias gradient)
// are the fp32 ones on the fp32 GEMM outputs, so the saved activations (att, the losses) stay
// fp32; the probabilities, dpreatt and dlogits are rounded only where a GEMM reads them. The CPU
// backend's bf16 mode (runtime/cpu/cpu_ops.h, cpu::bf16) rounds the same values. The
// vocab-parallel head shares its body with fp32 (cuda_backend_ops.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/cuda_ops.h"

namespace pipelane::cuda {

Bf16Copy::Bf16Copy(ScratchPool& pool, const float* src, std::size_t n, cudaStream_t stream) : t_(pool, n, stream) {
  convert_from_float<bf16>(t_.get(), src, n, stream);
}

Fp32Input::Fp32Input(ScratchPool& pool, ActivationIn x, std::size_t n, cudaStream_t stream) : f32_(x.f32) {
  if (!x.is_bf16()) return;
  widened_ = std::make_unique<Temp<float>>(pool, n, stream);
  convert_to_float<bf16>(widened_->get(), reinterpret_cast<const bf16*>(x.bf16), n, stream);
  f32_ = widened_->get();
}

Bf16Operand::Bf16Operand(ScratchPool& pool, const float* f32, const std::uint16_t* bf16_bits, std::size_t n,
                       cudaStream_t stream) {
  if (bf16_bits) {
    w_ = reinterpret_cast<const bf16*>(bf16_bits);
  } else {
    copy_ = std::make_unique<Bf16Copy>(pool, f32, n, stream);
    w_ = copy_->get();
  }
}


void CudaBackendImpl::matmul_forward_autocast(float* out, ActivationIn inp, GemmWeight weight, const float* bias,
                                              int N, int C, int OC, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("matmul_forward", {out, inp.data(), weight.data(), bias});
  const Bf16Operand x(*scratch_, inp, count(N, C), h);
  const Bf16Operand w(*scratch_, weight, count(OC, C), h);
  gemm(matmul_forward_gemm(out, x.get(), w.get(), bias, N, C, OC, kAutocast), s);
}

void CudaBackendImpl::matmul_backward_autocast(float* dinp, float* dweight, float* dbias, const float* dout,
                                               ActivationIn inp, GemmWeight weight, int N, int C, int OC,
                                               Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("matmul_backward", {dinp, dweight, dbias, dout, inp.data(), weight.data()});
  const Bf16Copy d(*scratch_, dout, count(N, OC), h);
  if (dinp) {
    const Bf16Operand w(*scratch_, weight, count(OC, C), h);
    gemm(matmul_backward_input_gemm(dinp, d.get(), w.get(), N, C, OC, kAutocast), s);
  }
  {
    const Bf16Operand x(*scratch_, inp, count(N, C), h);
    gemm(matmul_backward_weight_gemm(dweight, d.get(), x.get(), N, C, OC, kAutocast), s);
  }
  if (dbias) {  // column sums of the fp32 dout, not a GEMM
    const Temp<float> scratch(*scratch_, matmul_backward_bias_scratch_floats(N, OC), h);
    cuda::matmul_backward_bias<float>(dbias, dout, N, OC, scratch.get(), h);
  }
}

void CudaBackendImpl::matmul_backward_input_autocast(float* dinp, const float* dout, GemmWeight weight, int N,
                                                     int C, int OC, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("matmul_backward_input", {dinp, dout, weight.data()});
  const Bf16Copy d(*scratch_, dout, count(N, OC), h);
  const Bf16Operand w(*scratch_, weight, count(OC, C), h);
  gemm(matmul_backward_input_gemm(dinp, d.get(), w.get(), N, C, OC, kAutocast), s);
}

void CudaBackendImpl::attention_forward_autocast(float* out, float* att, const float* qkv, int B, int T, int C,
                                                 int NH, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_forward", {out, att, qkv});
  const int hs = C / NH, BNH = B * NH;
  const std::size_t n = count(B * T, C), na = static_cast<std::size_t>(BNH) * T * T;
  const Temp<float> heads(*scratch_, 3 * n, h), y(*scratch_, n, h);
  float *q = heads.get(), *k = q + n, *v = k + n;
  attention_permute_qkv<float>(q, k, v, qkv, B, T, C, NH, h);
  const Bf16Copy qkv16(*scratch_, q, 3 * n, h);
  const bf16 *q16 = qkv16.get(), *k16 = q16 + n, *v16 = k16 + n;
  gemm(attention_scores_gemm(att, q16, k16, BNH, T, hs, kAutocast), s);
  attention_softmax_forward<float>(att, att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T, h);
  const Bf16Copy att16(*scratch_, att, na, h);
  gemm(attention_values_gemm(y.get(), att16.get(), v16, BNH, T, hs, kAutocast), s);
  attention_causal_fixup<float>(y.get(), att, v, false, BNH, T, hs, h);
  attention_unpermute<float>(out, y.get(), B, T, C, NH, h);
}

void CudaBackendImpl::attention_backward_autocast(float* dqkv, const float* dout, const float* qkv, const float* att,
                                                  int B, int T, int C, int NH, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("attention_backward", {dqkv, dout, qkv, att});
  const int hs = C / NH, BNH = B * NH;
  const std::size_t n = count(B * T, C), na = static_cast<std::size_t>(BNH) * T * T;
  const Temp<float> heads(*scratch_, 3 * n, h), dheads(*scratch_, 3 * n, h), dy(*scratch_, n, h),
      datt(*scratch_, na, h);
  float *q = heads.get(), *k = q + n, *v = k + n;
  float *dq = dheads.get(), *dk = dq + n, *dv = dk + n;
  attention_permute_qkv<float>(q, k, v, qkv, B, T, C, NH, h);
  attention_unpermute_backward<float>(dy.get(), dout, B, T, C, NH, h);
  const Bf16Copy qkv16(*scratch_, q, 3 * n, h), dy16(*scratch_, dy.get(), n, h), att16(*scratch_, att, na, h);
  const bf16 *q16 = qkv16.get(), *k16 = q16 + n, *v16 = k16 + n;
  for (const GemmCall& g :
       attention_values_backward_gemms(datt.get(), dv, dy16.get(), att16.get(), v16, BNH, T, hs, kAutocast))
    gemm(g, s);
  attention_causal_fixup<float>(dv, att, dy.get(), true, BNH, T, hs, h);
  attention_softmax_backward<float>(datt.get(), datt.get(), att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T,
                                    h);
  const Bf16Copy dpre16(*scratch_, datt.get(), na, h);
  for (const GemmCall& g : attention_scores_backward_gemms(dq, dk, dpre16.get(), q16, k16, BNH, T, hs, kAutocast))
    gemm(g, s);
  attention_causal_fixup<float>(dq, datt.get(), k, false, BNH, T, hs, h);
  attention_causal_fixup<float>(dk, datt.get(), q, true, BNH, T, hs, h);
  attention_permute_qkv_backward<float>(dqkv, dq, dk, dv, B, T, C, NH, h);
}

void CudaBackendImpl::lm_head_logits_autocast(float* logits, const float* x, GemmWeight wte, int N, int C, int Vp,
                                              Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("lm_head_logits", {logits, x, wte.data()});
  const Bf16Copy x16(*scratch_, x, count(N, C), h);
  const Bf16Operand w16(*scratch_, wte, count(Vp, C), h);
  gemm(matmul_forward_gemm(logits, x16.get(), w16.get(), nullptr, N, C, Vp, kAutocast), s);
}

double CudaBackendImpl::lm_head_cross_entropy_autocast(float* losses, float* dx, float* dwte, const float* x,
                                                       GemmWeight wte, const std::int32_t* targets, int N, int C,
                                                       int V, int Vp, float grad_scale, float* scratch, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("lm_head_cross_entropy", {losses, dx, dwte, x, wte.data(), scratch});
  const DeviceInts tgt(*scratch_, targets, static_cast<std::size_t>(N), h);
  const Bf16Copy x16(*scratch_, x, count(N, C), h);
  const Bf16Operand w16(*scratch_, wte, count(Vp, C), h);
  const int R = head_chunk_rows(N, Vp);
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const bf16* xc = x16.get() + count(r0, C);
    gemm(matmul_forward_gemm(scratch, xc, w16.get(), nullptr, rows, C, Vp, kAutocast), s);
    cross_entropy_chunk<float>(losses + r0, scratch, tgt.get() + r0, rows, V, Vp, grad_scale, dx != nullptr, h);
    if (dx) {
      const Bf16Copy dlogits(*scratch_, scratch, count(rows, Vp), h);
      gemm(matmul_backward_input_gemm(dx + count(r0, C), dlogits.get(), w16.get(), rows, C, Vp, kAutocast), s);
      gemm(matmul_backward_weight_gemm(dwte, dlogits.get(), xc, rows, C, Vp, kAutocast), s);
    }
  }
  return host_sum(losses, static_cast<std::size_t>(N), h);
}

}  // namespace pipelane::cuda
