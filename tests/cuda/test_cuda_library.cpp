// The CUDA backend's library (libpipelane_cuda.so) on a machine without a GPU: every op links, a
// kernel launch without a device throws one clear error, cuBLASLt/cuDNN/NCCL refuse cleanly to
// start, and what needs no device works: cuBLASLt accepts every GemmCall's descriptors, cuDNN
// finalizes the attention graphs (tensors, operations, operation graph), NCCL makes unique ids.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/libs/cublaslt.h"
#include "runtime/cuda/libs/cudnn_graph.h"
#include "runtime/cuda/libs/nccl_links.h"

namespace pipelane::cuda_test {
namespace {

using cuda::bf16;

// Taking every launcher's address makes the linker find each instantiation in the library.
template <typename X>
std::vector<const void*> launchers() {
  using namespace cuda;
  return {reinterpret_cast<const void*>(&embedding_forward<X>),
          reinterpret_cast<const void*>(&embedding_backward<X>),
          reinterpret_cast<const void*>(&embedding_lookup_local<X>),
          reinterpret_cast<const void*>(&add_positions<X>),
          reinterpret_cast<const void*>(&embedding_backward_local<X>),
          reinterpret_cast<const void*>(&layernorm_forward<X>),
          reinterpret_cast<const void*>(&layernorm_backward<X>),
          reinterpret_cast<const void*>(&layernorm_backward_input<X>),
          reinterpret_cast<const void*>(&layernorm_backward_params<X>),
          reinterpret_cast<const void*>(&gelu_forward<X>),
          reinterpret_cast<const void*>(&gelu_backward<X>),
          reinterpret_cast<const void*>(&add_forward<X>),
          reinterpret_cast<const void*>(&add_inplace<X>),
          reinterpret_cast<const void*>(&scale_inplace<X>),
          reinterpret_cast<const void*>(&add_bias<X>),
          reinterpret_cast<const void*>(&matmul_backward_bias<X>),
          reinterpret_cast<const void*>(&attention_permute_qkv<X>),
          reinterpret_cast<const void*>(&attention_permute_qkv_backward<X>),
          reinterpret_cast<const void*>(&attention_unpermute<X>),
          reinterpret_cast<const void*>(&attention_unpermute_backward<X>),
          reinterpret_cast<const void*>(&attention_softmax_forward<X>),
          reinterpret_cast<const void*>(&attention_softmax_backward<X>),
          reinterpret_cast<const void*>(&attention_kv_cache_forward<X>),
          reinterpret_cast<const void*>(&cross_entropy_chunk<X>),
          reinterpret_cast<const void*>(&cross_entropy_chunk_row_max<X>),
          reinterpret_cast<const void*>(&cross_entropy_chunk_row_sums<X>),
          reinterpret_cast<const void*>(&cross_entropy_chunk_finish<X>),
          reinterpret_cast<const void*>(&adamw_update<X>),
          reinterpret_cast<const void*>(&sum_squares<X>)};
}

TEST(CudaLibrary, EveryOpLinksForBothTypes) {
  for (const void* f : launchers<float>()) EXPECT_NE(f, nullptr);
  for (const void* f : launchers<bf16>()) EXPECT_NE(f, nullptr);
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(CudaLibrary, LaunchWithoutDeviceThrowsOneClearError) {
  const std::string e = error_of([] {
    cuda::layernorm_forward<float, float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1,
                                          nullptr);
  });
  EXPECT_NE(e.find("CUDA launch of (layernorm_forward_kernel<floatX, outX>) failed: "), std::string::npos)
      << e;
  const std::string b = error_of([] { cuda::gelu_forward<bf16>(nullptr, nullptr, 1, nullptr); });
  EXPECT_NE(b.find("failed: "), std::string::npos) << b;
}

TEST(CudaLibrary, LibrariesRefuseToStartWithoutDevice) {
  EXPECT_NE(error_of([] { cuda::CublasLt lt; }).find("cuBLASLt: cublasLtCreate failed"),
            std::string::npos);
  EXPECT_NE(error_of([] { cuda::Cudnn dnn; }).find("cuDNN: cudnnCreate failed"), std::string::npos);
  const cuda::NcclId id = cuda::nccl_unique_id();
  EXPECT_TRUE(std::any_of(id.bytes.begin(), id.bytes.end(), [](char c) { return c != 0; }));
  const std::string nccl = error_of([&] {
    cuda::NcclLinks links(0, {{0, 1, cuda::P2PChannel::Activations}}, {id});
  });
  EXPECT_NE(nccl.find("NCCL: "), std::string::npos) << nccl;
}

// cuBLASLt checks each descriptor attribute on the host: every kind of call the plans make.
TEST(CudaLibrary, CublasLtAcceptsEveryGemmCallsDescriptors) {
  using cuda::DataType;
  for (const DataType t : {DataType::F32, DataType::BF16}) {
    char buf[64] = {};
    void* p = buf;
    std::vector<cuda::GemmCall> calls = {
        cuda::matmul_forward_gemm(p, p, p, p, 16, 24, 32, t),
        cuda::matmul_forward_gemm(p, p, p, p, 16, 24, 32, t, p),
        cuda::matmul_forward_gemm(p, p, p, nullptr, 16, 24, 32, t, p),
        cuda::matmul_backward_input_gemm(p, p, p, 16, 24, 32, t),
        cuda::matmul_backward_input_gemm(p, p, p, 16, 24, 32, t, p),
        cuda::matmul_backward_weight_gemm(static_cast<float*>(p), p, p, 16, 24, 32, t),
        cuda::matmul_backward_weight_gemm(static_cast<float*>(p), p, p, 16, 24, 32, t,
                                          static_cast<float*>(p)),
        cuda::attention_scores_gemm(p, p, p, 6, 64, 16, t),
        cuda::attention_values_gemm(p, p, p, 6, 64, 16, t),
    };
    for (const auto& g : cuda::attention_values_backward_gemms(p, p, p, p, p, 6, 64, 16, t))
      calls.push_back(g);
    for (const auto& g : cuda::attention_scores_backward_gemms(p, p, p, p, p, 6, 64, 16, t))
      calls.push_back(g);
    for (const cuda::GemmCall& g : calls) {
      SCOPED_TRACE(::testing::Message() << to_string(t) << " epilogue " << to_string(g.epilogue)
                                        << " batch " << g.batch);
      EXPECT_NO_THROW(cuda::GemmDescriptors d(g, 16));
    }
  }
}

// cuDNN finalizes every tensor, operation and the operation graph without a device; which engine
// runs it is a question for the GPU.
TEST(CudaLibrary, CudnnFinalizesTheAttentionGraphs) {
  for (const cuda::DataType t : {cuda::DataType::F32, cuda::DataType::BF16}) {
    SCOPED_TRACE(to_string(t));
    EXPECT_EQ(error_of([&] {
                cuda::build_operation_graph(cuda::causal_attention_forward_graph(2, 64, 128, 2, t));
              }),
              "");
    EXPECT_EQ(
        error_of([&] {
          cuda::build_operation_graph(cuda::causal_attention_backward_graph(2, 64, 128, 2, t));
        }),
        "");
  }
}

}  // namespace
}  // namespace pipelane::cuda_test
