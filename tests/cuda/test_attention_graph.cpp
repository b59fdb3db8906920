// The cuDNN causal-attention graphs (runtime/cuda/plans/attention_graph.h) executed by a CPU
// interpreter of the operations' semantics (strides, broadcasting, reductions over the axes where
// the output has size 1), against cpu::attention_forward/backward. This proves the tensor layouts
// (q, k, v read in place from qkv, o and dq/dk/dv written in place), the mask and the algebra of
// the backward before cuDNN sees the graph. fp32 NMSE limit 1e-10 (as the composed attention
// test); bf16 storage (qkv, out, P and dS rounded to bf16): 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "runtime/cuda/plans/attention_graph.h"
#include "runtime/cpu/cpu_ops.h"
#include "tests/cuda/compare.h"
#include "runtime/cuda/emu/gemm_interpreter.h"
#include "runtime/cuda/emu/graph_interpreter.h"

namespace pipelane::cuda_test {
namespace {

using cuda::Graph;
using cuda_emu::bf16_bits_to_float;
using cuda_emu::float_to_bf16_bits;
using cuda_emu::run_gemm;
using cuda_emu::load;
using cuda_emu::store;
using cuda::GraphBuffer;
using cuda::GraphOpKind;
using cuda::GraphTensor;
using cuda::GraphType;
using Index = std::array<std::int64_t, 4>;

// fp32 or bf16-bit storage of given values.
struct Storage {
  cuda::DataType type;
  std::vector<float> f;
  std::vector<std::uint16_t> b;
  Storage(cuda::DataType t, const std::vector<float>& v) : type(t), f(v) {
    for (float x : v) b.push_back(float_to_bf16_bits(x));
    if (t == cuda::DataType::BF16)
      for (std::size_t i = 0; i < f.size(); ++i) f[i] = bf16_bits_to_float(b[i]);
  }
  void* data() { return type == cuda::DataType::BF16 ? static_cast<void*>(b.data()) : f.data(); }
  Vec values() const {
    Vec v(f.size());
    for (std::size_t i = 0; i < f.size(); ++i)
      v[i] = type == cuda::DataType::BF16 ? bf16_bits_to_float(b[i]) : f[i];
    return v;
  }
};

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(AttentionGraph, ForwardAndBackwardMatchTheCpuOps) {
  struct Shape {
    int B, T, C, NH;
  };
  for (const cuda::DataType dt : {cuda::DataType::F32, cuda::DataType::BF16})
    for (const auto [B, T, C, NH] : {Shape{2, 5, 12, 3}, Shape{1, 1, 8, 2}, Shape{1, 17, 16, 2}}) {
      SCOPED_TRACE(::testing::Message() << to_string(dt) << " B=" << B << " T=" << T << " C=" << C);
      std::mt19937 rng(3u * C + T);
      const std::size_t n = static_cast<std::size_t>(B) * T * C;
      Storage qkv(dt, random_floats(rng, 3 * n)), dout(dt, random_floats(rng, n));
      Storage out(dt, std::vector<float>(n)), dqkv(dt, std::vector<float>(3 * n));
      std::vector<float> stats(static_cast<std::size_t>(B) * NH * T);
      std::map<GraphBuffer, void*> buffers{{GraphBuffer::Qkv, qkv.data()},
                                           {GraphBuffer::Out, out.data()},
                                           {GraphBuffer::Stats, stats.data()},
                                           {GraphBuffer::DOut, dout.data()},
                                           {GraphBuffer::DQkv, dqkv.data()}};
      cuda_emu::GraphInterpreter(cuda::causal_attention_forward_graph(B, T, C, NH, dt), buffers).run();
      cuda_emu::GraphInterpreter(cuda::causal_attention_backward_graph(B, T, C, NH, dt), buffers).run();

      // The CPU ops on the same (rounded) inputs.
      std::vector<float> cout(n), catt(static_cast<std::size_t>(B) * NH * T * T), cdqkv(3 * n);
      cpu::attention_forward(cout.data(), catt.data(), qkv.f.data(), B, T, C, NH);
      cpu::attention_backward(cdqkv.data(), dout.f.data(), qkv.f.data(), catt.data(), B, T, C, NH);
      // stats = max + log(sum exp) of the scaled causal scores, in double.
      const int hs = C / NH;
      Vec want_stats(stats.size());
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
          for (int i = 0; i < T; ++i) {
            Vec s(i + 1);
            for (int j = 0; j <= i; ++j) {
              double d = 0.0;
              for (int e = 0; e < hs; ++e)
                d += static_cast<double>(
                         qkv.f[(static_cast<std::size_t>(b) * T + i) * 3 * C + h * hs + e]) *
                     qkv.f[(static_cast<std::size_t>(b) * T + j) * 3 * C + C + h * hs + e];
              s[j] = d / std::sqrt(static_cast<double>(hs));
            }
            const double m = *std::max_element(s.begin(), s.end());
            double z = 0.0;
            for (double x : s) z += std::exp(x - m);
            want_stats[(static_cast<std::size_t>(b) * NH + h) * T + i] = m + std::log(z);
          }
      const bool bf = dt == cuda::DataType::BF16;
      const Tolerance tol{bf ? 1e-4 : 1e-10};
      EXPECT_TRUE(compare("out", out.values(), Vec(cout.begin(), cout.end()), tol, bf));
      EXPECT_TRUE(
          compare("stats", Vec(stats.begin(), stats.end()), want_stats, Tolerance{1e-10}, false));
      EXPECT_TRUE(compare("dqkv", dqkv.values(), Vec(cdqkv.begin(), cdqkv.end()), tol, bf));
    }
}

TEST(AttentionGraph, ReadsQkvInPlace) {
  const Graph g = cuda::causal_attention_forward_graph(2, 7, 12, 3, cuda::DataType::BF16);
  const GraphTensor& k = g.tensors.at(1);  // q, k^T, v come first
  EXPECT_EQ(k.name, "k^T");
  EXPECT_EQ(k.buffer, GraphBuffer::Qkv);
  EXPECT_EQ(k.offset, 12);                          // the k part starts at C
  EXPECT_EQ(k.dims, (Index{2, 3, 4, 7}));           // [B, NH, hs, T]
  EXPECT_EQ(k.strides, (Index{7 * 36, 4, 1, 36}));  // rows of 3C
  EXPECT_EQ(k.type, GraphType::BF16);
  int virtual_tensors = 0;
  for (const GraphTensor& t : g.tensors) virtual_tensors += t.is_virtual;
  EXPECT_GT(virtual_tensors, 8);  // everything between the two matmuls stays on chip
}

}  // namespace
}  // namespace pipelane::cuda_test
