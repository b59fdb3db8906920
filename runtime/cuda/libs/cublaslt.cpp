#include "runtime/cuda/libs/cublaslt.h"

#include <cstdint>
#include <utility>
#include <stdexcept>
#include <string>

namespace pipelane::cuda {

namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt: ") + what +
                             " failed: " + cublasLtGetStatusName(status) + " (" +
                             cublasLtGetStatusString(status) + ")");
}

cudaDataType_t cuda_type(DataType t) { return t == DataType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }
cublasOperation_t cublas_op(Trans t) { return t == Trans::T ? CUBLAS_OP_T : CUBLAS_OP_N; }

cublasLtEpilogue_t cublas_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::GeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::GeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::BGradB: return CUBLASLT_EPILOGUE_BGRADB;
  }
  throw std::invalid_argument("cuBLASLt: unknown epilogue");
}

template <typename V>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value,
         const char* what) {
  check(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value), what);
}

// A column-major rows x cols layout with ld, and the batch.
cublasLtMatrixLayout_t layout(DataType t, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                              int batch, std::int64_t batch_stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check(cublasLtMatrixLayoutCreate(&l, cuda_type(t), static_cast<std::uint64_t>(rows),
                                   static_cast<std::uint64_t>(cols), ld),
        "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const std::int32_t count = batch;
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                           sizeof count),
          "batch count");
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &batch_stride, sizeof batch_stride),
          "batch stride");
  }
  return l;
}

}  // namespace

GemmDescriptors::GemmDescriptors(const GemmCall& g, int sm_count_target) {
  try {
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "cublasLtMatmulDescCreate");
    set(op, CUBLASLT_MATMUL_DESC_TRANSA, cublas_op(g.transa), "transa");
    set(op, CUBLASLT_MATMUL_DESC_TRANSB, cublas_op(g.transb), "transb");
    set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, cublas_epilogue(g.epilogue), "epilogue");
    if (g.bias) {
      set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, "bias pointer");
      set(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(g.bias_type), "bias type");
    }
    if (g.aux) {
      set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux, "aux pointer");
      // The aux matrix's type is left unset: cuBLASLt then takes D's, which is what the plans
      // lay it out as (setting it explicitly is only needed for fp8 outputs).
      set(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld, "aux ld");
    }
    if (sm_count_target > 0)
      set(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, static_cast<std::int32_t>(sm_count_target),
          "SM count target");
    // op(A) is m x k: A itself is m x k (N) or k x m (T); likewise B.
    a = g.transa == Trans::N ? layout(g.a.type, g.m, g.k, g.a.ld, g.batch, g.a.batch_stride)
                             : layout(g.a.type, g.k, g.m, g.a.ld, g.batch, g.a.batch_stride);
    b = g.transb == Trans::N ? layout(g.b.type, g.k, g.n, g.b.ld, g.batch, g.b.batch_stride)
                             : layout(g.b.type, g.n, g.k, g.b.ld, g.batch, g.b.batch_stride);
    c = layout(g.c.type, g.m, g.n, g.c.ld, g.batch, g.c.batch_stride);
    d = layout(g.c.type, g.m, g.n, g.c.ld, g.batch, g.c.batch_stride);
  } catch (...) {
    release();
    throw;
  }
}

GemmDescriptors::~GemmDescriptors() { release(); }

void GemmDescriptors::release() {
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (op) cublasLtMatmulDescDestroy(op);
  a = b = c = d = nullptr;
  op = nullptr;
}

CublasLt::CublasLt() { check(cublasLtCreate(&handle_), "cublasLtCreate"); }

CublasLt::~CublasLt() {
  if (handle_) cublasLtDestroy(handle_);
}

namespace {

// The heuristic's preferences: the workspace, and each matrix's alignment as its pointer has it
// (cuBLASLt otherwise assumes 256 bytes and may choose kernels that fault on less).
cublasStatus_t set_preferences(cublasLtMatmulPreference_t pref, const GemmCall& g, const std::size_t& workspace_bytes) {
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace_bytes, sizeof workspace_bytes);
  const GemmAlignments al = gemm_alignments(g);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al.a}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al.c}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al.d}};
  for (const auto& [attr, bytes] : alignments)
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof bytes);
  return s;
}

}  // namespace

bool CublasLt::run(const GemmCall& g, void* workspace, std::size_t workspace_bytes,
                   cudaStream_t stream, int sm_count_target) const {
  const GemmDescriptors desc(g, sm_count_target);
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = set_preferences(pref, g, workspace_bytes);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle_, desc.op, desc.a, desc.b, desc.c, desc.d, pref, 1, &result,
                                            &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // "Not supported" is how the heuristic says that no algorithm fits these descriptors.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  check(status, "cublasLtMatmulAlgoGetHeuristic");
  check(cublasLtMatmul(handle_, desc.op, &g.alpha, g.a.ptr, desc.a, g.b.ptr, desc.b, &g.beta, g.c.ptr, desc.c, g.d,
                       desc.d, &result.algo, workspace, workspace_bytes, stream),
        "cublasLtMatmul");
  return true;
}

}  // namespace pipelane::cuda
