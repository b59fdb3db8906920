// The CUDA backend's Llama-family ops (runtime/backend.h): RMSNorm, RoPE and SwiGLU as own kernels
// (cuda_ops_llama.h), grouped-query attention as strided-batched GEMMs over the kv heads
// (plans/gqa_gemm_plan.h) around attention.cuh's permutes and causal softmax, the KV-cache
// attention with GQA, and the token lookup's backward without positions. fp32 storage; under
// bf16 compute the attention's GEMMs read bf16 copies of q, k, v, the probabilities, dy and
// dpreatt, exactly the values the CPU backend's bf16 mode rounds (runtime/cpu/ops_attention_gqa.cpp).
//
// [model] attention = cudnn does not apply here: the GQA attention always takes this cuBLASLt
// path (runtime/cuda/README.md says where cuDNN's graph API has GQA and why it is not used yet).
#include <cuda_runtime_api.h>

#include <cmath>
#include <memory>

#include "runtime/cuda/backend/cuda_backend_impl.h"
#include "runtime/cuda/backend/cuda_check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_ops_llama.h"
#include "runtime/cuda/plans/gqa_gemm_plan.h"

namespace pipelane::cuda {

namespace {

// A GEMM operand: the fp32 buffer itself, or (bf16 compute) a bf16 copy made in stream order
// and kept alive as long as this object.
class GemmOperand {
 public:
  GemmOperand(ScratchPool& pool, const float* src, std::size_t n, bool bf16, cudaStream_t stream)
      : fp32_(src), copy_(bf16 ? std::make_unique<Bf16Copy>(pool, src, n, stream) : nullptr) {}
  const void* get() const { return copy_ ? static_cast<const void*>(copy_->get()) : fp32_; }

 private:
  const float* fp32_;
  std::unique_ptr<Bf16Copy> copy_;
};

}  // namespace

// ---- RMSNorm ----

void CudaBackendImpl::rmsnorm_forward(ActivationOut out, float* rstd, const float* inp, const float* weight, int N,
                                      int C, float eps, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("rmsnorm_forward", {out.data(), rstd, inp, weight});
  if (out.is_bf16())
    cuda::rmsnorm_forward<float, bf16>(reinterpret_cast<bf16*>(out.bf16), rstd, inp, weight, N, C, eps, h);
  else
    cuda::rmsnorm_forward<float>(out.f32, rstd, inp, weight, N, C, eps, h);
}
void CudaBackendImpl::rmsnorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight,
                                             const float* rstd, int N, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("rmsnorm_backward_input", {dinp, dout, inp.data(), weight, rstd});
  const Fp32Input x(*scratch_, inp, count(N, C), h);
  cuda::rmsnorm_backward_input<float>(dinp, dout, x.get(), weight, rstd, N, C, h);
}
void CudaBackendImpl::rmsnorm_backward_params(float* dweight, const float* dout, ActivationIn inp, const float* rstd,
                                              int N, int C, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("rmsnorm_backward_params", {dweight, dout, inp.data(), rstd});
  const Fp32Input x(*scratch_, inp, count(N, C), h);
  const Temp<float> scratch(*scratch_, rmsnorm_backward_scratch_floats(N, C), h);
  cuda::rmsnorm_backward_params<float>(dweight, dout, x.get(), rstd, N, C, scratch.get(), h);
}

// ---- RoPE, SwiGLU ----

void CudaBackendImpl::rope_forward(float* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                                   Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("rope_forward", {x, table});
  rope_rotate<float>(x, table, B, T, pos0, heads, hs, ld, false, h);
}
void CudaBackendImpl::rope_backward(float* dx, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                                    Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("rope_backward", {dx, table});
  rope_rotate<float>(dx, table, B, T, pos0, heads, hs, ld, true, h);
}
void CudaBackendImpl::swiglu_forward(ActivationOut out, const float* gate, const float* up, std::size_t n, Stream& s) {
  expect_device("swiglu_forward", {out.data(), gate, up});
  into_activation(out, n, s, [&](float* y) { cuda::swiglu_forward<float>(y, gate, up, n, enter(s)); });
}
void CudaBackendImpl::swiglu_backward(float* dgate, float* dup, const float* dout, ActivationIn gate, ActivationIn up,
                                      std::size_t n, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("swiglu_backward", {dgate, dup, dout, gate.data(), up.data()});
  const Fp32Input g(*scratch_, gate, n, h), u(*scratch_, up, n, h);
  cuda::swiglu_backward<float>(dgate, dup, dout, g.get(), u.get(), n, h);
}

// ---- grouped-query attention ----

void CudaBackendImpl::attention_forward_gqa(ActivationOut output, ActivationOut probabilities, ActivationIn q_in,
                                            ActivationIn k_in, ActivationIn v_in, int B, int T, int NH, int KVH, int hs,
                                            Stream& s) {
  // bf16 q, k, v widened for the fp32 op (Fp32Input); fp32 ones as they are.
  const std::size_t nq_in = count(B * T, NH * hs), nkv_in = count(B * T, KVH * hs);
  const Fp32Input q32(*scratch_, q_in, nq_in, enter(s)), k32(*scratch_, k_in, nkv_in, enter(s)),
      v32(*scratch_, v_in, nkv_in, enter(s));
  const float *q = q32.get(), *k = k32.get(), *v = v32.get();
  if (output.is_bf16())  // the fp32 output on a temporary, rounded after (into_activation)
    return into_activation(output, count(B * T, NH * hs), s, [&](float* out) {
      attention_forward_gqa(out, probabilities, q, k, v, B, T, NH, KVH, hs, s);
    });
  float* out = output.f32;
  if (probabilities.is_bf16())
    return probabilities_into_bf16(OpKind::AttentionForwardGqa, probabilities.bf16,
                                   attention_gqa_saved_floats(B, T, NH, hs), s, [&](float* att) {
                                     attention_forward_gqa(out, att, q, k, v, B, T, NH, KVH, hs, s);
                                   });
  float* att = probabilities.f32;
  const cudaStream_t h = enter(s);
  expect_device("attention_forward_gqa", {out, att, q, k, v});
  const GqaShape shape{B, T, NH, KVH, hs};
  const int BNH = B * NH, G = shape.group();
  const bool bf16 = bf16_compute();
  const GemmTypes act = bf16 ? kAutocast : GemmTypes(DataType::F32);
  const std::size_t nq = count(B * T, NH * hs), nkv = count(B * T, KVH * hs), na = count(BNH * T, T);
  const Temp<float> qh(*scratch_, nq, h), kh(*scratch_, nkv, h), vh(*scratch_, nkv, h), y(*scratch_, nq, h);
  // [B,T,H*hs] -> [B,H,T,hs]: attention_unpermute_backward with C = H*hs is this permute.
  attention_unpermute_backward<float>(qh.get(), q, B, T, NH * hs, NH, h);
  attention_unpermute_backward<float>(kh.get(), k, B, T, KVH * hs, KVH, h);
  attention_unpermute_backward<float>(vh.get(), v, B, T, KVH * hs, KVH, h);
  {
    const GemmOperand q_op(*scratch_, qh.get(), nq, bf16, h), k_op(*scratch_, kh.get(), nkv, bf16, h);
    gemm(gqa_scores_gemm(att, q_op.get(), k_op.get(), shape, act), s);
  }
  attention_softmax_forward<float>(att, att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T, h);
  {
    const GemmOperand att_op(*scratch_, att, na, bf16, h), v_op(*scratch_, vh.get(), nkv, bf16, h);
    gemm(gqa_values_gemm(y.get(), att_op.get(), v_op.get(), shape, act), s);
  }
  attention_gqa_causal_fixup<float>(y.get(), att, vh.get(), false, BNH, G, T, hs, h);
  attention_unpermute<float>(out, y.get(), B, T, NH * hs, NH, h);
}

void CudaBackendImpl::attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q_in,
                                             ActivationIn k_in, ActivationIn v_in, ActivationIn out,
                                             ActivationIn probabilities, int B, int T, int NH, int KVH, int hs,
                                             Stream& s) {
  // bf16 q, k, v widened for the fp32 op (Fp32Input); fp32 ones as they are.
  const std::size_t nq_in = count(B * T, NH * hs), nkv_in = count(B * T, KVH * hs);
  const Fp32Input q32(*scratch_, q_in, nq_in, enter(s)), k32(*scratch_, k_in, nkv_in, enter(s)),
      v32(*scratch_, v_in, nkv_in, enter(s));
  const float *q = q32.get(), *k = k32.get(), *v = v32.get();
  if (probabilities.is_bf16())
    return probabilities_from_bf16(OpKind::AttentionBackwardGqa, probabilities.bf16,
                                   attention_gqa_saved_floats(B, T, NH, hs), s, [&](const float* att) {
                                     attention_backward_gqa(dq, dk, dv, dout, q, k, v, out, att, B, T, NH, KVH, hs, s);
                                   });
  const float* att = probabilities.f32;
  (void)out;  // the probabilities are kept: nothing to recompute
  const cudaStream_t h = enter(s);
  expect_device("attention_backward_gqa", {dq, dk, dv, dout, q, k, v, att});
  const GqaShape shape{B, T, NH, KVH, hs};
  const int BNH = B * NH, BKV = B * KVH, G = shape.group();
  const bool bf16 = bf16_compute();
  const GemmTypes act = bf16 ? kAutocast : GemmTypes(DataType::F32);
  const std::size_t nq = count(B * T, NH * hs), nkv = count(B * T, KVH * hs), na = count(BNH * T, T);
  const Temp<float> qh(*scratch_, nq, h), kh(*scratch_, nkv, h), vh(*scratch_, nkv, h), dy(*scratch_, nq, h);
  const Temp<float> dqh(*scratch_, nq, h), dkh(*scratch_, nkv, h), dvh(*scratch_, nkv, h), datt(*scratch_, na, h);
  attention_unpermute_backward<float>(qh.get(), q, B, T, NH * hs, NH, h);
  attention_unpermute_backward<float>(kh.get(), k, B, T, KVH * hs, KVH, h);
  attention_unpermute_backward<float>(vh.get(), v, B, T, KVH * hs, KVH, h);
  attention_unpermute_backward<float>(dy.get(), dout, B, T, NH * hs, NH, h);
  const GemmOperand q_op(*scratch_, qh.get(), nq, bf16, h), k_op(*scratch_, kh.get(), nkv, bf16, h);
  {
    const GemmOperand v_op(*scratch_, vh.get(), nkv, bf16, h), dy_op(*scratch_, dy.get(), nq, bf16, h),
        att_op(*scratch_, att, na, bf16, h);
    for (const GemmCall& g : gqa_values_backward_gemms(datt.get(), dvh.get(), dy_op.get(), att_op.get(), v_op.get(),
                                                       shape, act))
      gemm(g, s);
  }
  attention_gqa_causal_fixup<float>(dvh.get(), att, dy.get(), true, BKV, G, T, hs, h);
  attention_softmax_backward<float>(datt.get(), datt.get(), att, 1.0f / std::sqrt(static_cast<float>(hs)), BNH, T, h);
  {
    const GemmOperand dpre_op(*scratch_, datt.get(), na, bf16, h);
    for (const GemmCall& g :
         gqa_scores_backward_gemms(dqh.get(), dkh.get(), dpre_op.get(), q_op.get(), k_op.get(), shape, act))
      gemm(g, s);
  }
  attention_gqa_causal_fixup<float>(dqh.get(), datt.get(), kh.get(), false, BNH, G, T, hs, h);
  attention_gqa_causal_fixup<float>(dkh.get(), datt.get(), qh.get(), true, BKV, G, T, hs, h);
  attention_unpermute<float>(dq, dqh.get(), B, T, NH * hs, NH, h);
  attention_unpermute<float>(dk, dkh.get(), B, T, KVH * hs, KVH, h);
  attention_unpermute<float>(dv, dvh.get(), B, T, KVH * hs, KVH, h);
}

void CudaBackendImpl::attention_forward_kv_gqa(float* out, float* scores, const float* q, const float* k,
                                               const float* v, float* k_cache, float* v_cache, int past, int n,
                                               int NH, int KVH, int hs, Stream& s) {
  (void)scores;  // the kernel's online softmax needs no scores buffer: left as it is
  const cudaStream_t h = enter(s);
  expect_device("attention_forward_kv_gqa", {out, q, k, v, k_cache, v_cache});
  if (n <= 0) return;
  const std::size_t at = count(past, KVH * hs), bytes = count(n, KVH * hs) * sizeof(float);
  check_cuda(cudaMemcpyAsync(k_cache + at, k, bytes, cudaMemcpyDeviceToDevice, h), "cudaMemcpyAsync (keys to the cache)");
  check_cuda(cudaMemcpyAsync(v_cache + at, v, bytes, cudaMemcpyDeviceToDevice, h),
             "cudaMemcpyAsync (values to the cache)");
  attention_kv_cache_forward_gqa<float>(out, q, k_cache, v_cache, n, past, NH, KVH, hs, h);
}

// ---- the lookup's backward without positions ----

void CudaBackendImpl::embedding_backward_tokens(float* dwte, const float* dout, const std::int32_t* tokens, int N,
                                                int C, int v0, int vcount, Stream& s) {
  const cudaStream_t h = enter(s);
  expect_device("embedding_backward_tokens", {dwte, dout});
  const DeviceInts ids(*scratch_, tokens, static_cast<std::size_t>(N), h);
  cuda::embedding_backward_tokens<float>(dwte, dout, ids.get(), N, C, v0, vcount, h);
}

}  // namespace pipelane::cuda
