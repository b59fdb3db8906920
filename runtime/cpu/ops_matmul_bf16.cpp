// nn.Linear and the head's logits in bf16 compute mode: the fp32 kernels of ops_matmul.cpp on
// bf16-rounded copies of their GEMM operands (bf16_round.h says why that is a bf16 GEMM with fp32
// accumulation). The copies are made per call: this mode is the CPU's reference for bf16 training,
// not a fast path, and the fp32 path does not pass through here.
#include <vector>

#include "runtime/cpu/bf16_round.h"
#include "runtime/cpu/cpu_ops.h"

namespace pipelane::cpu {

void round_to_bf16(float* dst, const float* src, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < count; ++i) dst[i] = round_to_bf16(src[i]);
}

namespace bf16 {

namespace {
std::vector<float> rounded(const float* src, std::size_t n) {
  std::vector<float> out(n);
  round_to_bf16(out.data(), src, n);
  return out;
}
std::size_t count(int rows, int cols) { return static_cast<std::size_t>(rows) * cols; }
}  // namespace

// A GEMM input as the emulated GEMMs read it: fp32 rounded to bf16, or bf16 widened (the same
// values, so the same bits).
std::vector<float> gemm_input_values(ActivationIn x, std::size_t n) {
  if (!x.is_bf16()) return rounded(x.f32, n);
  std::vector<float> out(n);
  cast_from_bf16(out.data(), x.bf16, n);
  return out;
}

std::vector<float> gemm_weight_values(GemmWeight weight, std::size_t n) {
  if (!weight.is_bf16()) return rounded(weight.f32, n);
  std::vector<float> out(n);
  cast_from_bf16(out.data(), weight.bf16, n);
  return out;
}

void matmul_forward(float* out, ActivationIn inp, GemmWeight weight, const float* bias, int N,
                    int C, int OC) {
  const std::vector<float> x = gemm_input_values(inp, count(N, C)), w = gemm_weight_values(weight, count(OC, C));
  cpu::matmul_forward(out, x.data(), w.data(), bias, N, C, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, ActivationIn inp,
                     GemmWeight weight, int N, int C, int OC) {
  const std::vector<float> d = rounded(dout, count(N, OC)), x = gemm_input_values(inp, count(N, C));
  const std::vector<float> w = dinp ? gemm_weight_values(weight, count(OC, C)) : std::vector<float>{};
  cpu::matmul_backward(dinp, dweight, nullptr, d.data(), x.data(), w.data(), N, C, OC);
  // The bias gradient is a column sum of the fp32 dout, not a GEMM.
  if (dbias) matmul_backward_bias(dbias, dout, N, OC);
}

void matmul_backward_input(float* dinp, const float* dout, GemmWeight weight, int N, int C,
                           int OC) {
  const std::vector<float> d = rounded(dout, count(N, OC)), w = gemm_weight_values(weight, count(OC, C));
  cpu::matmul_backward_input(dinp, d.data(), w.data(), N, C, OC);
}

void lm_head_logits(float* logits, const float* x, GemmWeight wte, int N, int C, int Vp) {
  const std::vector<float> xr = rounded(x, count(N, C)), w = gemm_weight_values(wte, count(Vp, C));
  cpu::lm_head_logits(logits, xr.data(), w.data(), N, C, Vp);
}

}  // namespace bf16
}  // namespace pipelane::cpu
