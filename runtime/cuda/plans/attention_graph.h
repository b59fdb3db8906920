// Causal attention as cuDNN operation graphs (the backend C API: tensors, operations, a graph the
// runtime fusion engine compiles into a flash-attention kernel), described as plain data.
//
// What the installed cuDNN (9.19) offers for the causal mask, read from its headers: the generic
// pointwise modes the cudnn-frontend's causal mask is built from (CUDNN_POINTWISE_GEN_INDEX along
// an axis, CUDNN_POINTWISE_CMP_GE, CUDNN_POINTWISE_BINARY_SELECT), and a native SDPA operation
// (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR) whose attributes have no causal flag (Q, K,
// V, O, stats, scale, a block-mask tensor, sequence lengths, page tables). So the mask is
// described as the frontend does it: row index >= column index selects the score, else -inf.
// Whether an engine fuses this graph on a given GPU is only known there (heuristics; L3).
//
// Q, K, V are read in place from the fused qkv[B,T,3C] ([q | k | v], heads contiguous) and O is
// written in place into out[B,T,C], through strides: no permute. Forward also writes the row
// statistics (max + log of the sum of exp, fp32) that backward uses instead of the probabilities.
// Tests execute these graphs with a CPU interpreter against cpu::attention_forward/backward.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/plans/gemm_plan.h"  // DataType

namespace pipelane::cuda {

enum class GraphType : std::uint8_t { F32, BF16, I32, Bool };

// Which of the caller's buffers a non-virtual tensor lives in, at an element offset.
enum class GraphBuffer : std::uint8_t { None, Qkv, Out, Stats, DOut, DQkv };

struct GraphTensor {
  std::int64_t uid;
  std::string name;
  std::array<std::int64_t, 4> dims, strides;
  GraphType type;
  bool is_virtual;        // an intermediate the fused kernel never stores
  bool by_value = false;  // a scalar passed by value (scale, -inf)
  float value = 0.0f;     // its value
  GraphBuffer buffer = GraphBuffer::None;
  std::int64_t offset = 0;  // in elements of the buffer
};

// Operation kinds, named after their cuDNN counterparts: MATMUL, POINTWISE (MUL, SUB, DIV, ADD,
// EXP, LOG, IDENTITY (a cast to y's type), GEN_INDEX, CMP_GE, BINARY_SELECT), REDUCTION (MAX, ADD;
// the reduced axes are those where y has size 1), RESHAPE (here only to transpose the last two axes
// of a virtual tensor).
enum class GraphOpKind : std::uint8_t {
  Matmul,
  Mul,
  Sub,
  Div,
  Add,
  Exp,
  Log,
  Identity,
  GenIndex,
  CmpGe,
  BinarySelect,
  ReduceMax,
  ReduceAdd,
  Transpose
};

struct GraphOp {
  GraphOpKind kind;
  std::int64_t x, b = -1, t = -1;  // inputs (uids); b and t as cuDNN names them, -1 when unused
  std::int64_t y;                  // output uid
  int axis = -1;                   // GEN_INDEX: the axis whose index is produced
};

struct Graph {
  std::vector<GraphTensor> tensors;
  std::vector<GraphOp> ops;  // in dependency order
  const GraphTensor& tensor(std::int64_t uid) const {
    return tensors.at(static_cast<std::size_t>(uid));
  }
};

// Forward: out = softmax(causal(q k^T / sqrt(hs))) v and stats[B,NH,T,1]; `io` is the storage type
// of qkv and out.
Graph causal_attention_forward_graph(int B, int T, int C, int NH, DataType io);
// Backward: dqkv (=) from qkv, out, dout and stats.
Graph causal_attention_backward_graph(int B, int T, int C, int NH, DataType io);

}  // namespace pipelane::cuda
