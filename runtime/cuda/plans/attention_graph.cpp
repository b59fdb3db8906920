#include "runtime/cuda/plans/attention_graph.h"

#include <cmath>
#include <limits>
#include <utility>

namespace pipelane::cuda {

namespace {

using Dims = std::array<std::int64_t, 4>;

class Builder {
 public:
  Builder(int B, int T, int C, int NH, DataType io)
      : B_(B),
        T_(T),
        C_(C),
        NH_(NH),
        hs_(C / NH),
        io_(io == DataType::BF16 ? GraphType::BF16 : GraphType::F32) {}

  // [B,NH,T,hs] inside a [B,T,width] buffer at part offset `part * C` (q, k, v of qkv; out).
  std::int64_t heads(const char* name, GraphBuffer buf, int width, int part,
                     bool transposed = false) {
    const std::int64_t row = static_cast<std::int64_t>(width) * C_;
    Dims dims{B_, NH_, T_, hs_}, strides{T_ * row, hs_, row, 1};
    if (transposed) {  // [B,NH,hs,T]: the same memory, last two axes swapped
      std::swap(dims[2], dims[3]);
      std::swap(strides[2], strides[3]);
    }
    return add(name, dims, strides, io_, false, buf, static_cast<std::int64_t>(part) * C_);
  }
  std::int64_t stats(const char* name) {
    return add(name, {B_, NH_, T_, 1}, {NH_ * T_, T_, 1, 1}, GraphType::F32, false,
               GraphBuffer::Stats);
  }
  std::int64_t scalar(const char* name, float value) {
    const std::int64_t uid = add(name, {1, 1, 1, 1}, {1, 1, 1, 1}, GraphType::F32, false);
    g_.tensors.back().by_value = true;
    g_.tensors.back().value = value;
    return uid;
  }
  // A virtual [B,NH,rows,cols] tensor, packed.
  std::int64_t virt(const char* name, std::int64_t rows, std::int64_t cols,
                    GraphType type = GraphType::F32) {
    return add(name, {B_, NH_, rows, cols}, {NH_ * rows * cols, rows * cols, cols, 1}, type, true);
  }
  // The transpose of a packed virtual [B,NH,T,T] tensor: the same memory, last two strides
  // swapped (what a cuDNN RESHAPE produces).
  std::int64_t virt_transposed(const char* name, GraphType type) {
    const std::int64_t uid = virt(name, T_, T_, type);
    std::swap(g_.tensors.back().strides[2], g_.tensors.back().strides[3]);
    return uid;
  }
  std::int64_t op(GraphOpKind kind, std::int64_t x, std::int64_t b, std::int64_t y, int axis = -1,
                  std::int64_t t = -1) {
    g_.ops.push_back({kind, x, b, t, y, axis});
    return y;
  }
  // S = q k^T * scale with the causal mask applied (-inf above the diagonal): [B,NH,T,T].
  std::int64_t masked_scores(std::int64_t q, std::int64_t kt, std::int64_t scale) {
    const std::int64_t s = op(GraphOpKind::Matmul, q, kt, virt("scores", T_, T_));
    const std::int64_t ss = op(GraphOpKind::Mul, s, scale, virt("scaled_scores", T_, T_));
    const std::int64_t row =
        op(GraphOpKind::GenIndex, ss, -1, virt("row", T_, T_, GraphType::I32), 2);
    const std::int64_t col =
        op(GraphOpKind::GenIndex, ss, -1, virt("col", T_, T_, GraphType::I32), 3);
    const std::int64_t keep =
        op(GraphOpKind::CmpGe, row, col, virt("causal", T_, T_, GraphType::Bool));
    const std::int64_t ninf = scalar("minus_inf", -std::numeric_limits<float>::infinity());
    // BINARY_SELECT: y = t ? x : b
    return op(GraphOpKind::BinarySelect, ss, ninf, virt("masked_scores", T_, T_), -1, keep);
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(hs_)); }
  std::int64_t T() const { return T_; }
  std::int64_t hs() const { return hs_; }
  GraphType io() const { return io_; }
  Graph take() { return std::move(g_); }

 private:
  std::int64_t add(const char* name, Dims dims, Dims strides, GraphType type, bool is_virtual,
                   GraphBuffer buffer = GraphBuffer::None, std::int64_t offset = 0) {
    GraphTensor t;
    t.uid = static_cast<std::int64_t>(g_.tensors.size());
    t.name = name;
    t.dims = dims;
    t.strides = strides;
    t.type = type;
    t.is_virtual = is_virtual;
    t.buffer = buffer;
    t.offset = offset;
    g_.tensors.push_back(std::move(t));
    return g_.tensors.back().uid;
  }
  std::int64_t B_, T_, C_, NH_, hs_;
  GraphType io_;
  Graph g_;
};

}  // namespace

Graph causal_attention_forward_graph(int B, int T, int C, int NH, DataType io) {
  Builder g(B, T, C, NH, io);
  const std::int64_t q = g.heads("q", GraphBuffer::Qkv, 3, 0);
  const std::int64_t kt = g.heads("k^T", GraphBuffer::Qkv, 3, 1, true);
  const std::int64_t v = g.heads("v", GraphBuffer::Qkv, 3, 2);
  const std::int64_t scale = g.scalar("scale", g.scale());
  const std::int64_t s = g.masked_scores(q, kt, scale);
  const std::int64_t m = g.op(GraphOpKind::ReduceMax, s, -1, g.virt("row_max", g.T(), 1));
  const std::int64_t d = g.op(GraphOpKind::Sub, s, m, g.virt("shifted", g.T(), g.T()));
  const std::int64_t e = g.op(GraphOpKind::Exp, d, -1, g.virt("exp", g.T(), g.T()));
  const std::int64_t z = g.op(GraphOpKind::ReduceAdd, e, -1, g.virt("row_sum", g.T(), 1));
  const std::int64_t p =
      g.op(GraphOpKind::Div, e, z, g.virt("probabilities", g.T(), g.T(), g.io()));
  const std::int64_t logz = g.op(GraphOpKind::Log, z, -1, g.virt("log_row_sum", g.T(), 1));
  g.op(GraphOpKind::Add, m, logz, g.stats("stats"));
  g.op(GraphOpKind::Matmul, p, v, g.heads("o", GraphBuffer::Out, 1, 0));
  return g.take();
}

Graph causal_attention_backward_graph(int B, int T, int C, int NH, DataType io) {
  Builder g(B, T, C, NH, io);
  const std::int64_t T_ = g.T(), hs = g.hs();
  const std::int64_t q = g.heads("q", GraphBuffer::Qkv, 3, 0);
  const std::int64_t k = g.heads("k", GraphBuffer::Qkv, 3, 1);
  const std::int64_t kt = g.heads("k^T", GraphBuffer::Qkv, 3, 1, true);
  const std::int64_t vt = g.heads("v^T", GraphBuffer::Qkv, 3, 2, true);
  const std::int64_t o = g.heads("o", GraphBuffer::Out, 1, 0);
  const std::int64_t dout = g.heads("do", GraphBuffer::DOut, 1, 0);
  const std::int64_t stats = g.stats("stats");
  const std::int64_t scale = g.scalar("scale", g.scale());
  // P recomputed from the scores and the forward's statistics.
  const std::int64_t s = g.masked_scores(q, kt, scale);
  const std::int64_t d = g.op(GraphOpKind::Sub, s, stats, g.virt("shifted", T_, T_));
  const std::int64_t p = g.op(GraphOpKind::Exp, d, -1, g.virt("probabilities", T_, T_));
  // dV = P^T dO
  const std::int64_t pio =
      g.op(GraphOpKind::Identity, p, -1, g.virt("probabilities_io", T_, T_, g.io()));
  const std::int64_t pt =
      g.op(GraphOpKind::Transpose, pio, -1, g.virt_transposed("probabilities^T", g.io()));
  g.op(GraphOpKind::Matmul, pt, dout, g.heads("dv", GraphBuffer::DQkv, 3, 2));
  // dS = P * (dO V^T - rowsum(dO * O)), scaled
  const std::int64_t dp = g.op(GraphOpKind::Matmul, dout, vt, g.virt("dp", T_, T_));
  const std::int64_t doo = g.op(GraphOpKind::Mul, dout, o, g.virt("do_o", T_, hs));
  const std::int64_t rowdot = g.op(GraphOpKind::ReduceAdd, doo, -1, g.virt("row_dot", T_, 1));
  const std::int64_t diff = g.op(GraphOpKind::Sub, dp, rowdot, g.virt("dp_minus_dot", T_, T_));
  const std::int64_t ds = g.op(GraphOpKind::Mul, p, diff, g.virt("ds", T_, T_));
  const std::int64_t dss = g.op(GraphOpKind::Mul, ds, scale, g.virt("ds_scaled", T_, T_, g.io()));
  // dQ = dS K, dK = dS^T Q
  g.op(GraphOpKind::Matmul, dss, k, g.heads("dq", GraphBuffer::DQkv, 3, 0));
  const std::int64_t dst =
      g.op(GraphOpKind::Transpose, dss, -1, g.virt_transposed("ds_scaled^T", g.io()));
  g.op(GraphOpKind::Matmul, dst, q, g.heads("dk", GraphBuffer::DQkv, 3, 1));
  return g.take();
}

}  // namespace pipelane::cuda
