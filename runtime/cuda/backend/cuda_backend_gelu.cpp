// The MLP's GeLU fused into the GEMMs around it, through cuBLASLt's epilogues: GELU_AUX_BIAS on
// the first layer (pre = x W^T + b kept as the auxiliary output, out = gelu(pre)) and DGELU on
// the second layer's input gradient (dpre = (dout W) * gelu'(pre)). One kernel less each way,
// and neither pre nor out is read back by a separate elementwise pass. cuBLASLt wants the
// auxiliary output's leading dimension a multiple of 8 (gelu_epilogue_fits); other widths take
// Backend's two-op defaults, and so do shapes for which the library finds no algorithm with the
// epilogue (nothing was enqueued then). In bf16 compute the GEMMs read bf16 copies, as every GEMM
// does there.
#include "runtime/cuda/backend/cuda_backend_impl.h"

namespace pipelane::cuda {


void CudaBackendImpl::matmul_gelu_forward(float* pre, ActivationOut out, ActivationIn inp, GemmWeight weight,
                                          const float* bias, int N, int C, int OC, Stream& s) {
  if (out.is_bf16())  // the fp32 op into a temporary, rounded after (into_activation)
    return into_activation(out, count(N, OC), s,
                           [&](float* y) { matmul_gelu_forward(pre, y, inp, weight, bias, N, C, OC, s); });
  if (!gelu_epilogue_fits(OC)) return Backend::matmul_gelu_forward(pre, out, inp, weight, bias, N, C, OC, s);
  const cudaStream_t h = enter(s);
  expect_device("matmul_gelu_forward", {pre, out.f32, inp.data(), weight.data(), bias});
  bool fused = false;
  if (!bf16_compute()) {
    fused = try_gemm(
        matmul_forward_gemm(out.f32, fp32_input(inp, "matmul_gelu_forward"), fp32_weight(weight, "matmul_gelu_forward"),
                            bias, N, C, OC, DataType::F32, pre),
        s);
  } else {
    const Bf16Operand x(*scratch_, inp, count(N, C), h);
    const Bf16Operand w(*scratch_, weight, count(OC, C), h);
    fused = try_gemm(matmul_forward_gemm(out.f32, x.get(), w.get(), bias, N, C, OC, kAutocast, pre), s);
  }
  if (fused) return;
  ++unfused_epilogues_;
  Backend::matmul_gelu_forward(pre, out, inp, weight, bias, N, C, OC, s);
}

void CudaBackendImpl::matmul_backward_input_dgelu(float* dpre, const float* dout, GemmWeight weight,
                                                  ActivationIn pre_in, int N, int C, int OC, Stream& s) {
  const Fp32Input widened(*scratch_, pre_in, count(N, C), enter(s));  // a bf16 pre widened for the fp32 ops
  const float* pre = widened.get();
  if (!gelu_epilogue_fits(C)) return Backend::matmul_backward_input_dgelu(dpre, dout, weight, pre, N, C, OC, s);
  const cudaStream_t h = enter(s);
  expect_device("matmul_backward_input_dgelu", {dpre, dout, weight.data(), pre});
  bool fused = false;
  if (!bf16_compute()) {
    fused = try_gemm(matmul_backward_input_gemm(dpre, dout, fp32_weight(weight, "matmul_backward_input_dgelu"), N, C,
                                                OC, DataType::F32, pre),
                     s);
  } else {
    const Bf16Copy d(*scratch_, dout, count(N, OC), h);
    const Bf16Operand w(*scratch_, weight, count(OC, C), h);
    fused = try_gemm(matmul_backward_input_gemm(dpre, d.get(), w.get(), N, C, OC, kAutocast, pre), s);
  }
  if (fused) return;
  ++unfused_epilogues_;
  Backend::matmul_backward_input_dgelu(dpre, dout, weight, pre, N, C, OC, s);
}

}  // namespace pipelane::cuda
