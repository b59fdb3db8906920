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

// Runs a graph over caller buffers (fp32 values, stored as fp32 or bf16 bits per the tensors).
class Interpreter {
 public:
  Interpreter(const Graph& g, std::map<GraphBuffer, void*> buffers)
      : g_(g), buffers_(std::move(buffers)) {
    for (const GraphTensor& t : g.tensors)
      if (t.is_virtual)
        virtual_[t.uid].assign(
            static_cast<std::size_t>(t.dims[0] * t.dims[1] * t.dims[2] * t.dims[3]), 0.0);
  }

  void run() {
    for (const auto& op : g_.ops) {
      const GraphTensor& y = g_.tensor(op.y);
      for_each(y.dims, [&](const Index& i) { set(y, i, eval(op, i)); });
      if (op.kind == GraphOpKind::ReduceMax || op.kind == GraphOpKind::ReduceAdd) reduce(op);
    }
  }

 private:
  template <typename F>
  static void for_each(const Index& dims, F f) {
    Index i{};
    for (i[0] = 0; i[0] < dims[0]; ++i[0])
      for (i[1] = 0; i[1] < dims[1]; ++i[1])
        for (i[2] = 0; i[2] < dims[2]; ++i[2])
          for (i[3] = 0; i[3] < dims[3]; ++i[3]) f(i);
  }
  static std::int64_t at(const GraphTensor& t, const Index& i) {
    std::int64_t off = 0;
    for (int d = 0; d < 4; ++d) off += (t.dims[d] == 1 ? 0 : i[d]) * t.strides[d];  // broadcast
    return off;
  }
  double get(std::int64_t uid, const Index& i) const {
    const GraphTensor& t = g_.tensor(uid);
    if (t.by_value) return t.value;
    if (t.is_virtual) return virtual_.at(uid)[static_cast<std::size_t>(at(t, i))];
    return load(buffers_.at(t.buffer),
                t.type == GraphType::BF16 ? cuda::DataType::BF16 : cuda::DataType::F32,
                t.offset + at(t, i));
  }
  void set(const GraphTensor& t, const Index& i, double v) {
    if (t.type == GraphType::BF16)
      v = bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v)));
    if (t.type == GraphType::F32) v = static_cast<float>(v);
    if (t.is_virtual)
      virtual_[t.uid][static_cast<std::size_t>(at(t, i))] = v;
    else
      store(buffers_.at(t.buffer),
            t.type == GraphType::BF16 ? cuda::DataType::BF16 : cuda::DataType::F32,
            t.offset + at(t, i), v);
  }
  double eval(const cuda::GraphOp& op, const Index& i) const {
    switch (op.kind) {
      case GraphOpKind::Matmul: {
        const std::int64_t K = g_.tensor(op.x).dims[3];
        double s = 0.0;
        for (std::int64_t k = 0; k < K; ++k)
          s += get(op.x, {i[0], i[1], i[2], k}) * get(op.b, {i[0], i[1], k, i[3]});
        return s;
      }
      case GraphOpKind::Mul: return get(op.x, i) * get(op.b, i);
      case GraphOpKind::Sub: return get(op.x, i) - get(op.b, i);
      case GraphOpKind::Div: return get(op.x, i) / get(op.b, i);
      case GraphOpKind::Add: return get(op.x, i) + get(op.b, i);
      case GraphOpKind::Exp: return std::exp(get(op.x, i));
      case GraphOpKind::Log: return std::log(get(op.x, i));
      case GraphOpKind::Identity: return get(op.x, i);
      case GraphOpKind::GenIndex: return static_cast<double>(i[op.axis]);
      case GraphOpKind::CmpGe: return get(op.x, i) >= get(op.b, i) ? 1.0 : 0.0;
      case GraphOpKind::BinarySelect: return get(op.t, i) != 0.0 ? get(op.x, i) : get(op.b, i);
      case GraphOpKind::Transpose: return get(op.x, {i[0], i[1], i[3], i[2]});
      case GraphOpKind::ReduceMax: return -std::numeric_limits<double>::infinity();
      case GraphOpKind::ReduceAdd: return 0.0;
    }
    return 0.0;
  }
  // y starts at the identity (set by eval); fold every x element into y at its reduced index.
  void reduce(const cuda::GraphOp& op) {
    const GraphTensor& x = g_.tensor(op.x);
    const GraphTensor& y = g_.tensor(op.y);
    for_each(x.dims, [&](const Index& i) {
      const double v = get(op.x, i), cur = get(op.y, i);  // y broadcasts over the reduced axes
      set(y, i, op.kind == GraphOpKind::ReduceMax ? std::max(cur, v) : cur + v);
    });
  }

  const Graph& g_;
  std::map<GraphBuffer, void*> buffers_;
  std::map<std::int64_t, std::vector<double>> virtual_;
};

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
      Interpreter(cuda::causal_attention_forward_graph(B, T, C, NH, dt), buffers).run();
      Interpreter(cuda::causal_attention_backward_graph(B, T, C, NH, dt), buffers).run();

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
