// cuBLASLt behind the GemmCall plans (plans/gemm_plan.h): the descriptors are built from a plan
// (host only, no device needed), the algorithm comes from cuBLASLt's heuristic for the given
// workspace, the product runs on the caller's stream. Errors throw std::runtime_error naming the
// call and cuBLAS's status.
#pragma once
#include <cublasLt.h>

#include <cstddef>

#include "runtime/cuda/plans/gemm_plan.h"

namespace pipelane::cuda {

// The descriptors of one GemmCall; destroyed with the object.
class GemmDescriptors {
 public:
  // sm_count_target > 0 plans the GEMM for that many SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET),
  // leaving the rest to other streams (lanes, communication).
  explicit GemmDescriptors(const GemmCall& g, int sm_count_target = 0);
  ~GemmDescriptors();
  GemmDescriptors(const GemmDescriptors&) = delete;
  GemmDescriptors& operator=(const GemmDescriptors&) = delete;

  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;

 private:
  void release();
};

class CublasLt {
 public:
  // Throws (cublasLtCreate's status) when no usable device is present.
  CublasLt();
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // Runs g on `stream`; the workspace comes from the caller's arena (32 MiB suits Hopper). The
  // heuristic is told the workspace and each matrix's real alignment (gemm_alignments). False,
  // with nothing enqueued, when it returns no algorithm.
  bool run(const GemmCall& g, void* workspace, std::size_t workspace_bytes, cudaStream_t stream,
           int sm_count_target = 0) const;

 private:
  cublasLtHandle_t handle_ = nullptr;
};

}  // namespace pipelane::cuda
