// What cuBLASLt is asked for each matmul of the model, as plain data: the row-major nn.Linear
// (out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias, as cpu::matmul_forward) and its backward, and
// the attention's strided-batched GEMMs on q, k, v [B*NH, T, hs]. cuBLASLt is column-major: a
// row-major X[r,c] is the column-major X^T[c,r] with leading dimension c, so every row-major
// product is computed as its transpose, D^T = op(B)^T op(A)^T, without copying anything.
//
// These are pure functions with no CUDA dependency: tests execute each GemmCall with a small
// interpreter of column-major GEMM semantics and compare with the row-major reference, which
// proves the transposes, leading dimensions, batch strides and epilogues before any GPU runs
// them; cublaslt_gemm.h hands the same GemmCall to the library.
#pragma once
#include <cstdint>
#include <vector>

namespace pipelane::cuda {

enum class DataType : std::uint8_t { F32, BF16 };
enum class Trans : std::uint8_t { N, T };

// cuBLASLt epilogues used here (CUBLASLT_EPILOGUE_*). Aux is the GeLU's pre-activation, laid out
// like D. BGradB writes (overwrites) the column sums of op(B) over k into `bias` (n values).
enum class Epilogue : std::uint8_t {
  None,
  Bias,         // D = A op B + bias[m] (per row of column-major D)
  GeluAux,      // aux = A op B; D = gelu(aux)
  GeluAuxBias,  // aux = A op B + bias[m]; D = gelu(aux)
  DGelu,        // D = (A op B) * gelu'(aux)
  BGradB,       // D = A op B (+ beta C); bias[j] = sum_p op(B)[p, j]
};

// A GEMM's types: its operands A and B, and its output C/D (with an epilogue's bias and aux).
// Storage precision gives both the same type; bf16 compute on fp32 storage (runtime/backend.h) is
// {BF16 operands, F32 output}: cuBLASLt's A/B CUDA_R_16BF, C/D CUDA_R_32F, compute 32F.
struct GemmTypes {
  DataType operands = DataType::F32, output = DataType::F32;
  GemmTypes() = default;
  GemmTypes(DataType both) : operands(both), output(both) {}  // implicit: storage = compute
  GemmTypes(DataType ops, DataType out) : operands(ops), output(out) {}
};

const char* to_string(DataType t);
const char* to_string(Epilogue e);

// One column-major operand: element (i, j) of batch b is at ptr + b * batch_stride + i + j * ld.
struct Operand {
  const void* ptr = nullptr;
  DataType type = DataType::F32;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
};

// A row-major [rows, cols] matrix seen by cuBLASLt: column-major [cols, rows], ld = cols.
inline Operand row_major(const void* ptr, DataType type, std::int64_t cols, std::int64_t batch_stride = 0) {
  return Operand{ptr, type, cols, batch_stride};
}

// D = alpha * op(A)[m,k] op(B)[k,n] + beta * C, then the epilogue; `batch` products at once.
// Compute and scale types are fp32 (CUBLAS_COMPUTE_32F, CUDA_R_32F) for every data type. C is D
// when beta != 0 (accumulation in place).
struct GemmCall {
  Trans transa = Trans::N, transb = Trans::N;
  int m = 0, n = 0, k = 0, batch = 1;
  Operand a, b, c;
  void* d = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::None;
  void* bias = nullptr;  // read (Bias, GeluAuxBias) or written (BGradB)
  DataType bias_type = DataType::F32;
  void* aux = nullptr;  // written (GeluAux*), read (DGelu); type and ld of D
  std::int64_t aux_ld = 0;
};

// The alignment cuBLASLt may assume of each matrix (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES):
// the largest power of two dividing its pointer, at most 256 (cuBLASLt's default assumption).
// Arenas align to 64 bytes and op temporaries such as `q + n` to less, so the default would let
// the heuristic pick kernels that fault on them. A null pointer (C when beta = 0) counts as 256.
struct GemmAlignments {
  std::uint32_t a = 256, b = 256, c = 256, d = 256;
};
std::uint32_t pointer_alignment(const void* p);
GemmAlignments gemm_alignments(const GemmCall& g);

// ---- nn.Linear, row-major, as cpu::matmul_forward / matmul_backward ----
// `act`: the types of inputs and weights (operands) and outputs; weight gradients are fp32.

// cuBLASLt requires the GeLU aux matrix's leading dimension (the width of the GeLU's input: the
// layer's output forward, its input backward) to be a multiple of 8; otherwise the GeLU runs as
// its own kernel. The fused plans throw std::invalid_argument when it does not fit.
bool gelu_epilogue_fits(int width);

// out = inp @ weight^T + bias (bias may be null). With gelu_pre non-null the GeLU that follows
// the layer is fused: gelu_pre = inp @ weight^T + bias (kept for backward), out = gelu(gelu_pre).
GemmCall matmul_forward_gemm(void* out, const void* inp, const void* weight, const void* bias,
                             int N, int C, int OC, GemmTypes act, void* gelu_pre = nullptr);
// dinp (=) = dout @ weight. With gelu_pre non-null (the layer's input was gelu(gelu_pre)), the
// GeLU's backward is fused: dinp = (dout @ weight) * gelu'(gelu_pre), the gradient of gelu_pre.
GemmCall matmul_backward_input_gemm(void* dinp, const void* dout, const void* weight, int N, int C,
                                    int OC, GemmTypes act, const void* gelu_pre = nullptr);
// dweight (+=, fp32) = dout^T @ inp. With dbias_out non-null, also dbias_out (=, fp32, OC values)
// = the column sums of dout (the caller adds them into its accumulating bias gradient).
GemmCall matmul_backward_weight_gemm(float* dweight, const void* dout, const void* inp, int N,
                                     int C, int OC, GemmTypes act, float* dbias_out = nullptr);

// ---- attention on q, k, v, y [BNH, T, hs] (attention_permute_qkv's layout) ----
// preatt[r] = q[r] @ k[r]^T ([T,T] per r; the 1/sqrt(hs) scale is the softmax kernel's).
GemmCall attention_scores_gemm(void* preatt, const void* q, const void* k, int BNH, int T, int hs,
                               GemmTypes act);
// y[r] = att[r] @ v[r]
GemmCall attention_values_gemm(void* y, const void* att, const void* v, int BNH, int T, int hs,
                               GemmTypes act);
// Backward of y = att @ v: datt = dy @ v^T, dv = att^T @ dy (both =).
std::vector<GemmCall> attention_values_backward_gemms(void* datt, void* dv, const void* dy,
                                                      const void* att, const void* v, int BNH,
                                                      int T, int hs, GemmTypes act);
// Backward of preatt = q @ k^T: dq = dpreatt @ k, dk = dpreatt^T @ q (both =).
std::vector<GemmCall> attention_scores_backward_gemms(void* dq, void* dk, const void* dpreatt,
                                                      const void* q, const void* k, int BNH, int T,
                                                      int hs, GemmTypes act);

}  // namespace pipelane::cuda
