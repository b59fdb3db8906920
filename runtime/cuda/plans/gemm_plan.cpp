#include "runtime/cuda/plans/gemm_plan.h"

#include <stdexcept>
#include <string>

namespace pipelane::cuda {

const char* to_string(DataType t) { return t == DataType::BF16 ? "bf16" : "fp32"; }

const char* to_string(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "none";
    case Epilogue::Bias: return "bias";
    case Epilogue::GeluAux: return "gelu_aux";
    case Epilogue::GeluAuxBias: return "gelu_aux_bias";
    case Epilogue::DGelu: return "dgelu";
    case Epilogue::BGradB: return "bgradb";
  }
  return "?";
}

bool gelu_epilogue_fits(int width) { return width % 8 == 0; }

std::uint32_t pointer_alignment(const void* p) {
  constexpr std::uintptr_t kMost = 256;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address == 0) return kMost;
  const std::uintptr_t lowest_bit = address & (~address + 1);
  return static_cast<std::uint32_t>(lowest_bit < kMost ? lowest_bit : kMost);
}

GemmAlignments gemm_alignments(const GemmCall& g) {
  // C is D when beta != 0 (in-place accumulation); when beta = 0 cuBLASLt still takes C's layout.
  const void* c = g.c.ptr ? g.c.ptr : g.d;
  return {pointer_alignment(g.a.ptr), pointer_alignment(g.b.ptr), pointer_alignment(c),
          pointer_alignment(g.d)};
}

namespace {

void check_gelu_width(int width, const char* where) {
  if (!gelu_epilogue_fits(width))
    throw std::invalid_argument(std::string(where) +
                                ": the GeLU epilogue needs a width divisible by 8, got " +
                                std::to_string(width));
}

}  // namespace

GemmCall matmul_forward_gemm(void* out, const void* inp, const void* weight, const void* bias,
                             int N, int C, int OC, GemmTypes act, void* gelu_pre) {
  // out^T[OC,N] = weight[OC,C] @ inp^T[C,N]: weight (column-major [C,OC]) transposed, inp as is.
  GemmCall g;
  g.transa = Trans::T;
  g.transb = Trans::N;
  g.m = OC, g.n = N, g.k = C;
  g.a = row_major(weight, act.operands, C);
  g.b = row_major(inp, act.operands, C);
  g.c = row_major(out, act.output, OC);
  g.d = out;
  g.bias = const_cast<void*>(bias);  // read only
  g.bias_type = act.output;
  if (gelu_pre) {
    check_gelu_width(OC, "matmul_forward_gemm");
    g.epilogue = bias ? Epilogue::GeluAuxBias : Epilogue::GeluAux;
    g.aux = gelu_pre;
    g.aux_ld = OC;
  } else {
    g.epilogue = bias ? Epilogue::Bias : Epilogue::None;
  }
  return g;
}

GemmCall matmul_backward_input_gemm(void* dinp, const void* dout, const void* weight, int N, int C,
                                    int OC, GemmTypes act, const void* gelu_pre) {
  // dinp^T[C,N] = weight^T[C,OC] @ dout^T[OC,N]: both as stored.
  GemmCall g;
  g.transa = Trans::N;
  g.transb = Trans::N;
  g.m = C, g.n = N, g.k = OC;
  g.a = row_major(weight, act.operands, C);
  g.b = row_major(dout, act.operands, OC);
  g.c = row_major(dinp, act.output, C);
  g.d = dinp;
  if (gelu_pre) {
    check_gelu_width(C, "matmul_backward_input_gemm");
    g.epilogue = Epilogue::DGelu;
    g.aux = const_cast<void*>(gelu_pre);  // read only
    g.aux_ld = C;
  }
  return g;
}

GemmCall matmul_backward_weight_gemm(float* dweight, const void* dout, const void* inp, int N,
                                     int C, int OC, GemmTypes act, float* dbias_out) {
  // dweight^T[C,OC] += inp^T[C,N] @ dout[N,OC]: inp as stored, dout (column-major [OC,N])
  // transposed. The sum over k = N of op(B) = dout is the bias gradient (BGRADB).
  GemmCall g;
  g.transa = Trans::N;
  g.transb = Trans::T;
  g.m = C, g.n = OC, g.k = N;
  g.a = row_major(inp, act.operands, C);
  g.b = row_major(dout, act.operands, OC);
  g.c = row_major(dweight, DataType::F32, C);
  g.d = dweight;
  g.beta = 1.0f;
  if (dbias_out) {
    g.epilogue = Epilogue::BGradB;
    g.bias = dbias_out;
    g.bias_type = DataType::F32;
  }
  return g;
}

namespace {

// Per-batch strides of [T,hs] and [T,T] matrices.
struct AttentionStrides {
  std::int64_t ths, tt;
};
AttentionStrides strides(int T, int hs) {
  return {static_cast<std::int64_t>(T) * hs, static_cast<std::int64_t>(T) * T};
}

GemmCall batched(int BNH, Trans ta, Trans tb, int m, int n, int k, Operand a, Operand b, void* d,
                 GemmTypes act, std::int64_t ldd, std::int64_t d_stride) {
  GemmCall g;
  g.transa = ta, g.transb = tb;
  g.m = m, g.n = n, g.k = k, g.batch = BNH;
  g.a = a, g.b = b;
  g.c = Operand{d, act.output, ldd, d_stride};
  g.d = d;
  return g;
}

}  // namespace

GemmCall attention_scores_gemm(void* preatt, const void* q, const void* k, int BNH, int T, int hs,
                               GemmTypes act) {
  // preatt^T[j,i] = k[j,:] . q[i,:]: k (column-major [hs,T]) transposed, q as stored.
  const AttentionStrides s = strides(T, hs);
  return batched(BNH, Trans::T, Trans::N, T, T, hs, row_major(k, act.operands, hs, s.ths),
                 row_major(q, act.operands, hs, s.ths), preatt, act, T, s.tt);
}

GemmCall attention_values_gemm(void* y, const void* att, const void* v, int BNH, int T, int hs,
                               GemmTypes act) {
  // y^T[hs,T] = v^T[hs,T] @ att^T[T,T]: both as stored.
  const AttentionStrides s = strides(T, hs);
  return batched(BNH, Trans::N, Trans::N, hs, T, T, row_major(v, act.operands, hs, s.ths),
                 row_major(att, act.operands, T, s.tt), y, act, hs, s.ths);
}

std::vector<GemmCall> attention_values_backward_gemms(void* datt, void* dv, const void* dy,
                                                      const void* att, const void* v, int BNH,
                                                      int T, int hs, GemmTypes act) {
  const AttentionStrides s = strides(T, hs);
  return {
      // datt^T[j,i] = v[j,:] . dy[i,:]
      batched(BNH, Trans::T, Trans::N, T, T, hs, row_major(v, act.operands, hs, s.ths),
              row_major(dy, act.operands, hs, s.ths), datt, act, T, s.tt),
      // dv^T[hs,T] = dy^T[hs,T] @ att[T,T]: att (column-major att^T) transposed
      batched(BNH, Trans::N, Trans::T, hs, T, T, row_major(dy, act.operands, hs, s.ths),
              row_major(att, act.operands, T, s.tt), dv, act, hs, s.ths),
  };
}

std::vector<GemmCall> attention_scores_backward_gemms(void* dq, void* dk, const void* dpreatt,
                                                      const void* q, const void* k, int BNH, int T,
                                                      int hs, GemmTypes act) {
  const AttentionStrides s = strides(T, hs);
  return {
      // dq^T[hs,T] = k^T[hs,T] @ dpreatt^T[T,T]
      batched(BNH, Trans::N, Trans::N, hs, T, T, row_major(k, act.operands, hs, s.ths),
              row_major(dpreatt, act.operands, T, s.tt), dq, act, hs, s.ths),
      // dk^T[hs,T] = q^T[hs,T] @ dpreatt[T,T]
      batched(BNH, Trans::N, Trans::T, hs, T, T, row_major(q, act.operands, hs, s.ths),
              row_major(dpreatt, act.operands, T, s.tt), dk, act, hs, s.ths),
  };
}

}  // namespace pipelane::cuda
