// A CPU interpreter of the cuDNN causal-attention graphs (runtime/cuda/plans/attention_graph.h):
// every operation's semantics (strides, broadcasting, reductions over the axes where the output
// has size 1) in double, each stored tensor rounded to its type. tests/cuda/test_attention_graph.cpp
// checks the graphs with it against the CPU ops; the emulated CUDA backend runs
// `[model] attention = cudnn` through it where cuDNN would run the graphs on a GPU.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "runtime/cuda/emu/gemm_interpreter.h"
#include "runtime/cuda/plans/attention_graph.h"

namespace pipelane::cuda_emu {

using GraphIndex = std::array<std::int64_t, 4>;

// Runs a graph over caller buffers (fp32 values, stored as fp32 or bf16 bits per the tensors).
class GraphInterpreter {
 public:
  GraphInterpreter(const cuda::Graph& g, std::map<cuda::GraphBuffer, void*> buffers)
      : g_(g), buffers_(std::move(buffers)) {
    for (const cuda::GraphTensor& t : g.tensors)
      if (t.is_virtual)
        virtual_[t.uid].assign(
            static_cast<std::size_t>(t.dims[0] * t.dims[1] * t.dims[2] * t.dims[3]), 0.0);
  }

  void run() {
    for (const auto& op : g_.ops) {
      const cuda::GraphTensor& y = g_.tensor(op.y);
      for_each(y.dims, [&](const GraphIndex& i) { set(y, i, eval(op, i)); });
      if (op.kind == cuda::GraphOpKind::ReduceMax || op.kind == cuda::GraphOpKind::ReduceAdd) reduce(op);
    }
  }

 private:
  template <typename F>
  static void for_each(const GraphIndex& dims, F f) {
    GraphIndex i{};
    for (i[0] = 0; i[0] < dims[0]; ++i[0])
      for (i[1] = 0; i[1] < dims[1]; ++i[1])
        for (i[2] = 0; i[2] < dims[2]; ++i[2])
          for (i[3] = 0; i[3] < dims[3]; ++i[3]) f(i);
  }
  static std::int64_t at(const cuda::GraphTensor& t, const GraphIndex& i) {
    std::int64_t off = 0;
    for (int d = 0; d < 4; ++d) off += (t.dims[d] == 1 ? 0 : i[d]) * t.strides[d];  // broadcast
    return off;
  }
  double get(std::int64_t uid, const GraphIndex& i) const {
    const cuda::GraphTensor& t = g_.tensor(uid);
    if (t.by_value) return t.value;
    if (t.is_virtual) return virtual_.at(uid)[static_cast<std::size_t>(at(t, i))];
    return load(buffers_.at(t.buffer),
                t.type == cuda::GraphType::BF16 ? cuda::DataType::BF16 : cuda::DataType::F32,
                t.offset + at(t, i));
  }
  void set(const cuda::GraphTensor& t, const GraphIndex& i, double v) {
    if (t.type == cuda::GraphType::BF16)
      v = bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v)));
    if (t.type == cuda::GraphType::F32) v = static_cast<float>(v);
    if (t.is_virtual)
      virtual_[t.uid][static_cast<std::size_t>(at(t, i))] = v;
    else
      store(buffers_.at(t.buffer),
            t.type == cuda::GraphType::BF16 ? cuda::DataType::BF16 : cuda::DataType::F32,
            t.offset + at(t, i), v);
  }
  double eval(const cuda::GraphOp& op, const GraphIndex& i) const {
    switch (op.kind) {
      case cuda::GraphOpKind::Matmul: {
        const std::int64_t K = g_.tensor(op.x).dims[3];
        double s = 0.0;
        for (std::int64_t k = 0; k < K; ++k)
          s += get(op.x, {i[0], i[1], i[2], k}) * get(op.b, {i[0], i[1], k, i[3]});
        return s;
      }
      case cuda::GraphOpKind::Mul: return get(op.x, i) * get(op.b, i);
      case cuda::GraphOpKind::Sub: return get(op.x, i) - get(op.b, i);
      case cuda::GraphOpKind::Div: return get(op.x, i) / get(op.b, i);
      case cuda::GraphOpKind::Add: return get(op.x, i) + get(op.b, i);
      case cuda::GraphOpKind::Exp: return std::exp(get(op.x, i));
      case cuda::GraphOpKind::Log: return std::log(get(op.x, i));
      case cuda::GraphOpKind::Identity: return get(op.x, i);
      case cuda::GraphOpKind::GenIndex: return static_cast<double>(i[op.axis]);
      case cuda::GraphOpKind::CmpGe: return get(op.x, i) >= get(op.b, i) ? 1.0 : 0.0;
      case cuda::GraphOpKind::BinarySelect: return get(op.t, i) != 0.0 ? get(op.x, i) : get(op.b, i);
      case cuda::GraphOpKind::Transpose: return get(op.x, {i[0], i[1], i[3], i[2]});
      case cuda::GraphOpKind::ReduceMax: return -std::numeric_limits<double>::infinity();
      case cuda::GraphOpKind::ReduceAdd: return 0.0;
    }
    return 0.0;
  }
  // y starts at the identity (set by eval); fold every x element into y at its reduced index.
  void reduce(const cuda::GraphOp& op) {
    const cuda::GraphTensor& x = g_.tensor(op.x);
    const cuda::GraphTensor& y = g_.tensor(op.y);
    for_each(x.dims, [&](const GraphIndex& i) {
      const double v = get(op.x, i), cur = get(op.y, i);  // y broadcasts over the reduced axes
      set(y, i, op.kind == cuda::GraphOpKind::ReduceMax ? std::max(cur, v) : cur + v);
    });
  }

  const cuda::Graph& g_;
  std::map<cuda::GraphBuffer, void*> buffers_;
  std::map<std::int64_t, std::vector<double>> virtual_;
};

}  // namespace pipelane::cuda_emu
