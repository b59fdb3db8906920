// nn.Linear and the head's logits in bf16 compute mode on oneDNN (onednn_bf16_gemm.h): each
// operand converted to bf16 once per op (the same rounding as the emulated path), the GEMMs in
// bf16 with fp32 accumulation into the fp32 outputs. The calls mirror ops_matmul.cpp's sgemm
// calls one for one, so the contracts (=, +=, the fp32 bias) are the same.
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/onednn_bf16_gemm.h"

namespace pipelane::cpu::onednn {

namespace {
std::size_t count(int rows, int cols) { return static_cast<std::size_t>(rows) * cols; }
enum Slot { kFirst, kSecond, kThird };
}  // namespace

const std::uint16_t* weight_bits(OnednnBf16Gemm& g, int slot, GemmWeight w, std::size_t n) {
  return w.is_bf16() ? w.bf16 : g.staged(slot, w.f32, n);
}

namespace {
// A bf16 input goes to oneDNN as it is; an fp32 one is converted into staging slot `slot`.
const std::uint16_t* input_bits(OnednnBf16Gemm& g, int slot, ActivationIn x, std::size_t n) {
  return x.is_bf16() ? x.bf16 : g.staged(slot, x.f32, n);
}
}  // namespace

void matmul_forward(OnednnBf16Gemm& g, float* out, ActivationIn inp, GemmWeight weight, const float* bias,
                    int N, int C, int OC) {
  const std::lock_guard<std::mutex> lock(g.op_mutex());
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      float* o = out + static_cast<std::size_t>(n) * OC;
#pragma omp simd
      for (int k = 0; k < OC; ++k) o[k] = bias[k];
    }
  }
  const std::uint16_t* x = input_bits(g, kFirst, inp, count(N, C));
  const std::uint16_t* w = weight_bits(g, kSecond, weight, count(OC, C));
  g.gemm(false, true, N, OC, C, x, C, w, C, bias != nullptr, out, OC);
}

void matmul_backward(OnednnBf16Gemm& g, float* dinp, float* dweight, float* dbias, const float* dout,
                     ActivationIn inp, GemmWeight weight, int N, int C, int OC) {
  const std::lock_guard<std::mutex> lock(g.op_mutex());
  const std::uint16_t* d = g.staged(kFirst, dout, count(N, OC));
  if (dinp) {  // dinp[N,C] = dout[N,OC] @ weight[OC,C]
    const std::uint16_t* w = weight_bits(g, kSecond, weight, count(OC, C));
    g.gemm(false, false, N, C, OC, d, OC, w, C, false, dinp, C);
  }
  // dweight[OC,C] += dout^T[OC,N] @ inp[N,C]
  const std::uint16_t* x = input_bits(g, kThird, inp, count(N, C));
  g.gemm(true, false, OC, C, N, d, OC, x, C, true, dweight, C);
  // The bias gradient is a column sum of the fp32 dout, not a GEMM.
  if (dbias) matmul_backward_bias(dbias, dout, N, OC);
}

void matmul_backward_input(OnednnBf16Gemm& g, float* dinp, const float* dout, GemmWeight weight, int N, int C,
                           int OC) {
  const std::lock_guard<std::mutex> lock(g.op_mutex());
  // matmul_backward's dinp GEMM on the same operands: the same primitive, the same bits.
  const std::uint16_t* d = g.staged(kFirst, dout, count(N, OC));
  const std::uint16_t* w = weight_bits(g, kSecond, weight, count(OC, C));
  g.gemm(false, false, N, C, OC, d, OC, w, C, false, dinp, C);
}

void lm_head_logits(OnednnBf16Gemm& g, float* logits, const float* x, GemmWeight wte, int N, int C, int Vp) {
  matmul_forward(g, logits, x, wte, nullptr, N, C, Vp);
}

}  // namespace pipelane::cpu::onednn
