// The Backend: the only door to compute and memory (ggml-style). Everything above runtime/ —
// the model, the executor, lanes, the trainer — allocates, copies, orders work and computes
// through a Backend and the Streams and Events it creates; none of them touches a kernel.
//
// Memory: arenas by kind (device memory, pinned host staging) with hard quotas and high-water
// marks (runtime/arena.h). Pointers into a Device arena may not be host-addressable (CUDA): code
// above runtime/ passes them to ops and copies, never dereferences them; initial values are
// written into host memory and copied in.
//
// Streams carry a priority: training compute highest, communication next, lanes lowest. Every op
// and copy runs on the Stream passed last (llm.c's launcher convention); work on one stream runs
// in issue order, and Events order work across streams. On the CPU backend a stream is the
// calling thread: ops run synchronously and an event is complete when recorded.
//
// Ops: every op of the op table (OpKind) is a method here, forward and backward, fp32 with the
// gradient conventions of llm.c (parameter gradients accumulate +=, input gradients are
// overwritten =, except layernorm's dinp which accumulates: a layernorm's input is always the
// residual stream, whose gradient is a sum). N = rows (B*T), C = channels, row-major. Reductions
// run over a fixed partition, so results do not depend on the thread count of our own kernels.
// supports(op, dtype) says what a backend can run. The ops with a bf16 buffer: the three
// bf16-storage casts (below), the attention's saved probabilities and the norms' output
// (ActivationOut/In), and under compute precision BF16 the GEMM family's weight operand
// (GemmWeight: the matmuls and the LM head read a bf16 weight in place of rounding an fp32 one)
// and nn.Linear's input (a bf16 input in place of rounding an fp32 one).
//
// Compute precision (compute_precision(), chosen when the backend is made): F32, or BF16 the way
// PyTorch's autocast runs bf16: every buffer stays fp32 (weights as masters, gradients, optimizer
// state, activations, losses, norms), and only the GEMMs of the matmul family (nn.Linear forward
// and both gradients, the attention's score and value products forward and backward, the LM
// head's logits, dx and dwte, also vocab-parallel) round their operands to bf16 (nearest even)
// and accumulate in fp32 into fp32 outputs, as a bf16 tensor-core GEMM with fp32 accumulation
// does. Every other op (and the KV-cache attention, an own kernel) is fp32 either way.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/arena.h"
#include "runtime/tensor.h"

namespace pipelane {

enum class StreamPriority { High, Normal, Low };  // training compute, communication, lanes
const char* stream_priority_name(StreamPriority p);

class Stream {
 public:
  virtual ~Stream() = default;
  virtual StreamPriority priority() const = 0;
  virtual void synchronize() = 0;  // returns when all work issued on it has completed
};

class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;  // completes when the stream's prior work has
  virtual bool query() const = 0;           // complete yet? (never blocks)
  virtual void synchronize() = 0;           // blocks the host until complete
  virtual void wait_on(Stream& stream) = 0; // later work on `stream` waits for this event
  // Milliseconds between two recorded, completed events (this one the later).
  virtual double elapsed_ms_since(const Event& earlier) const = 0;
};

enum class OpKind : std::uint8_t {
  EmbeddingForward, EmbeddingBackward, EmbeddingLookupLocal, AddPositions, EmbeddingBackwardLocal,
  LayerNormForward, LayerNormBackward, LayerNormBackwardInput, LayerNormBackwardParams,
  MatmulForward, MatmulBackward, MatmulBackwardInput, MatmulGeluForward, MatmulBackwardInputDgelu,
  AttentionForward, AttentionBackward, AttentionForwardKv,
  GeluForward, GeluBackward, Add, AddInplace, AddBias, Scale, SumSquares,
  LmHeadLogits, LmHeadCrossEntropy, LmHeadCrossEntropyVocabParallel,
  AdamW,
  PagerankStep,
  // The bfs and graphsgd lanes' steps (issue 24): a pull BFS level slice, a slice of Gardenia's SGD.
  BfsStep, GraphSgdStep,
  // The Llama family (issue 22): RMSNorm, RoPE, SwiGLU, grouped-query attention, the embedding
  // without positions. A backend without them says so in supports() (CPU and CUDA have them all).
  RmsNormForward, RmsNormBackward, RmsNormBackwardInput, RmsNormBackwardParams, RopeForward, RopeBackward,
  SwigluForward, SwigluBackward, AttentionForwardGqa, AttentionBackwardGqa, AttentionForwardKvGqa,
  EmbeddingBackwardTokens,
  // The CNN lanes' ops (issue 24): convolution's im2col/col2im (the GEMM is matmul_*), batch norm
  // in training mode, pooling, ReLU, dropout, the classifier's loss, SGD with momentum. Throwing
  // defaults as the Llama family's; CPU and CUDA have them all.
  CnnIm2col, CnnCol2im, BatchNormForward, BatchNormBackward, BatchNormStatistics, MaxPoolForward, MaxPoolBackward,
  AvgPoolForward, AvgPoolBackward, ReluForward, ReluBackward, Dropout, ClassifierCrossEntropy, SgdMomentum,
  // bf16 storage (issue 23): fp32 <-> bf16 buffers, and fp32 values rounded to bf16 in place.
  CastToBf16, CastFromBf16, RoundToBf16,
  Count  // not an op
};
const char* op_kind_name(OpKind op);
// The ops with a bf16 buffer, what supports(op, DType::BF16) says yes to on CPU and CUDA: the
// casts, the attention's probabilities, the norms' output, and under compute precision BF16 the
// ops that read a GEMM weight (GemmWeight, below) or, some of them, a bf16 input.
inline bool is_bf16_cast(OpKind op) {
  return op == OpKind::CastToBf16 || op == OpKind::CastFromBf16 || op == OpKind::RoundToBf16;
}
inline bool reads_gemm_weight(OpKind op) {
  switch (op) {
    case OpKind::MatmulForward: case OpKind::MatmulBackward: case OpKind::MatmulBackwardInput:
    case OpKind::MatmulGeluForward: case OpKind::MatmulBackwardInputDgelu: case OpKind::LmHeadLogits:
    case OpKind::LmHeadCrossEntropy: case OpKind::LmHeadCrossEntropyVocabParallel:
      return true;
    default:
      return false;
  }
}
// The attention ops whose saved probabilities (`att`) may be a bf16 buffer (ActivationOut/In):
// bf16 storage keeps them in bf16 without an fp32 copy of its own. Any compute precision.
inline bool keeps_bf16_probabilities(OpKind op) {
  return op == OpKind::AttentionForward || op == OpKind::AttentionBackward || op == OpKind::AttentionForwardGqa ||
         op == OpKind::AttentionBackwardGqa;
}
// The norms' forward, whose output may be a bf16 buffer (ActivationOut): bf16 storage keeps it so.
// Any compute precision.
inline bool writes_bf16_norm(OpKind op) { return op == OpKind::LayerNormForward || op == OpKind::RmsNormForward; }
// The element-wise activations whose output may be a bf16 buffer (ActivationOut): GeLU, alone or
// after its GEMM, and SwiGLU. bf16 storage keeps the MLP's activation so. Any compute precision.
inline bool writes_bf16_activation(OpKind op) {
  return op == OpKind::GeluForward || op == OpKind::MatmulGeluForward || op == OpKind::SwigluForward;
}
// The element-wise backwards whose kept input may be a bf16 buffer (ActivationIn): GeLU's, alone
// or fused after its GEMM, and SwiGLU's. bf16 storage keeps the MLP's GEMM outputs so.
inline bool reads_bf16_activation(OpKind op) {
  return op == OpKind::GeluBackward || op == OpKind::MatmulBackwardInputDgelu || op == OpKind::SwigluBackward;
}
// The norms' backward, whose input `inp` may be a bf16 buffer (ActivationIn): bf16 storage reads the
// kept residual stream there. Any compute precision.
inline bool reads_bf16_norm_input(OpKind op) {
  switch (op) {
    case OpKind::LayerNormBackward: case OpKind::LayerNormBackwardInput: case OpKind::LayerNormBackwardParams:
    case OpKind::RmsNormBackward: case OpKind::RmsNormBackwardInput: case OpKind::RmsNormBackwardParams:
      return true;
    default:
      return false;
  }
}
// The GEMMs whose input activation may be a bf16 buffer under bf16 compute (ActivationIn: it reads
// what it would have rounded an fp32 input to): nn.Linear forward, its weight gradient, the
// GeLU-fused forward.
inline bool reads_bf16_gemm_input(OpKind op) {
  return op == OpKind::MatmulForward || op == OpKind::MatmulBackward || op == OpKind::MatmulGeluForward;
}
// What supports(op, BF16) answers on a backend of compute precision `compute` (a backend whose
// attention saves something other than the probabilities says no for those).
inline bool has_bf16_buffer(OpKind op, DType compute) {
  return is_bf16_cast(op) || keeps_bf16_probabilities(op) || writes_bf16_norm(op) || reads_bf16_norm_input(op) ||
         writes_bf16_activation(op) || reads_bf16_activation(op) || (compute == DType::BF16 && reads_gemm_weight(op));
}

// The weight operand of a GEMM (the matmul family, the LM head): an fp32 tensor, or its bf16 copy
// (`[train] gemm_weights = bf16`: the stage's compute weights, rounded from the fp32 masters once
// a step instead of inside every GEMM). A bf16 weight needs compute precision BF16
// (std::invalid_argument otherwise); there a GEMM rounds an fp32 weight to exactly these values,
// so both operands give the same bits. Implicit from `const float*`: the fp32 call sites read as
// they always did.
struct GemmWeight {
  const float* f32 = nullptr;
  const std::uint16_t* bf16 = nullptr;
  GemmWeight(const float* w) : f32(w) {}  // NOLINT(google-explicit-constructor)
  static GemmWeight of_bf16(const std::uint16_t* w) {
    GemmWeight g(nullptr);
    g.bf16 = w;
    return g;
  }
  bool is_bf16() const { return bf16 != nullptr; }
  const void* data() const { return bf16 ? static_cast<const void*>(bf16) : static_cast<const void*>(f32); }
};

// An activation buffer an op writes: fp32, or bf16 (bf16 storage: the top half of each fp32 bit
// pattern, rounded to nearest even) where supports(op, BF16) says the op takes one. An op with a
// bf16 buffer computes in fp32 as always and rounds what it writes there; its results elsewhere
// are the fp32 buffer's bits. Implicit from `float*`, as GemmWeight: fp32 call sites read as they
// did.
struct ActivationOut {
  float* f32 = nullptr;
  std::uint16_t* bf16 = nullptr;
  ActivationOut(float* p) : f32(p) {}  // NOLINT(google-explicit-constructor)
  static ActivationOut of_bf16(std::uint16_t* p) {
    ActivationOut a(nullptr);
    a.bf16 = p;
    return a;
  }
  bool is_bf16() const { return bf16 != nullptr; }
  void* data() const { return bf16 ? static_cast<void*>(bf16) : static_cast<void*>(f32); }
};
// An activation buffer an op reads: fp32, or bf16 (widened exactly: an op reading a bf16 buffer
// gives the bits it gives on an fp32 buffer of the same values).
struct ActivationIn {
  const float* f32 = nullptr;
  const std::uint16_t* bf16 = nullptr;
  ActivationIn(const float* p) : f32(p) {}  // NOLINT(google-explicit-constructor)
  ActivationIn(ActivationOut a) : f32(a.f32), bf16(a.bf16) {}  // NOLINT(google-explicit-constructor)
  static ActivationIn of_bf16(const std::uint16_t* p) {
    ActivationIn a(static_cast<const float*>(nullptr));
    a.bf16 = p;
    return a;
  }
  bool is_bf16() const { return bf16 != nullptr; }
  const void* data() const { return bf16 ? static_cast<const void*>(bf16) : static_cast<const void*>(f32); }
};

// The collectives of a tensor-parallel group, handed to the one op that needs them mid-kernel
// (the vocab-parallel head). Each reduces element-wise over the group, in place.
struct GroupReduce {
  std::function<void(float* data, std::size_t n)> sum;
  std::function<void(float* data, std::size_t n)> max;
};

// One AdamW step (PyTorch's AdamW: decoupled weight decay, bias correction); t is 1-based.
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int t;
};

// ---- PageRank: one bounded slice of a power iteration (the pagerank lane's step) ----
// Graph: a CSR by destination (the in-edges of v are sources[offsets[v] .. offsets[v + 1]), in
// that order); contrib[u] = rank[u] / out_degree[u], 0 for a vertex without out-edges. For every
// v in [v_begin, v_end): acc = the fp32 sum of contrib_in[source] in CSR order, r = fmaf(damping,
// acc, state->base), rank_out[v] = r, contrib_out[v] = r / out_degree[v] (0 without out-edges),
// delta[v] = |r - rank_in[v]|. Then the slice's sums of delta and of r over the vertices without
// out-edges, in double over a fixed partition: kPagerankSumLanes lanes, lane t adding vertices
// v_begin + t, v_begin + t + kPagerankSumLanes, ... in order, the lanes then combined pairwise
// (t += t + h for h = kPagerankSumLanes / 2, ..., 1); they are added to state->residual_sum and
// dangling_sum, the slice's in-edges to state->edges. A slice ending at `vertices` ends the
// iteration: residual = residual_sum, iterations + 1, base = float(fma(damping, dangling_sum / N,
// (1 - damping) / N)) in double, the sums back to 0, done = residual < tolerance || iterations >=
// max_iterations. Once done is set every later step does nothing, so a caller may enqueue steps
// before it has read whether the run has converged. An empty slice does nothing. No atomics, no
// order that depends on threads: every backend gives the same bits (each output is one thread's,
// and the sums run over the partition above).
inline constexpr int kPagerankSumLanes = 256;

// Written by the caller once (the initial base, zeros), then only by pagerank_step.
struct PagerankState {
  double residual_sum = 0;    // the running iteration's sum of delta over its slices so far
  double dangling_sum = 0;    // ... and of its new ranks without out-edges
  double residual = 0;        // the L1 change of the last complete iteration
  std::uint64_t edges = 0;    // in-edges pulled by the steps that ran (not the no-ops after done)
  std::int64_t iterations = 0;  // complete iterations
  float base = 0;             // (1 - damping)/N + damping * (dangling rank of the input)/N
  std::uint32_t done = 0;     // 1: converged or at max_iterations; later steps are no-ops
};

struct PagerankStep {
  const std::uint64_t* offsets;       // [vertices + 1]
  const std::uint32_t* sources;       // [edges]
  const std::uint32_t* out_degree;    // [vertices]
  std::uint32_t vertices;
  const float* rank_in;               // the iteration's input: ranks and contributions
  const float* contrib_in;
  float* rank_out;                    // its output (other buffers than the input's)
  float* contrib_out;
  float* delta;                       // |rank_out - rank_in|, per vertex
  PagerankState* state;               // in the op's memory (device memory on a GPU)
  float damping;
  double tolerance;
  std::int64_t max_iterations;
  std::uint32_t v_begin, v_end;       // the slice: a caller bounds a step's edges by it
};

// ---- The CNN lanes' ops (lanes/builtin/cnn/) ----
// Features are NHWC: row r = (n*H + h)*W + w of an [N, H, W, C] tensor, its C channels contiguous.
// The window ops run over one block [r0, r1) of *output* rows: a lane cuts each phase into blocks
// that fit its step's budget, and blocks run in ascending order compute what the uncut phase does.
// Input gradients accumulate (+=: a feature's gradient gathers from several layers), parameter
// gradients too. Every sum has the CPU loop's order: rows ascending, and per input element its
// contributions in ascending output row (the CUDA kernels gather instead of scattering: no float
// atomics, and the same bits as the CPU's sequential adds).

// The window of a convolution or a pooling over an [n, h, w, c] input producing [n, out_h, out_w,
// c or OC]: a square kernel, a stride and zero padding (padded cells are zeros for im2col and are
// skipped by pooling; adaptive average pooling ignores kernel, stride and pad).
struct CnnWindow {
  int n = 0, h = 0, w = 0, c = 0;
  int out_h = 0, out_w = 0;
  int kernel = 1, stride = 1, pad = 0;
};

// nn.BatchNorm2d in training mode over the M = rows values of each of C channels. A phase of
// batch_norm_forward/backward is a set of blocks over [0, rows); the block starting at row 0 does
// the phase's per-channel start (below), so the phases must run in order, each over all rows.
struct BatchNormTensors {
  const float* x = nullptr;       // [rows, C] input
  float* y = nullptr;             // forward output
  const float* dy = nullptr;      // backward: the output's gradient
  float* dx = nullptr;            // backward: the input's (+=)
  const float* weight = nullptr;  // gamma, beta [C]
  const float* bias = nullptr;
  float* dweight = nullptr;       // (+=)
  float* dbias = nullptr;
  double* sum_a = nullptr;        // [C] each: sums carried from block to block
  double* sum_b = nullptr;
  float* mean = nullptr;          // [C] each: the batch statistics, saved for backward
  float* rstd = nullptr;
  float* var_unbiased = nullptr;  // for the running variance
  std::int64_t rows = 0;          // M
  int C = 0;
  float eps = 1e-5f;
};

// torch.optim.SGD (dampening 0, no Nesterov).
struct SgdMomentumParams {
  float lr, momentum, weight_decay;
};

// ---- BFS: one bounded slice of a level-synchronous pull (bottom-up) traversal (the bfs lane) ----
// Graph: a CSR by destination (the in-neighbours of v are sources[offsets[v] .. offsets[v + 1])).
// Depths are int32, -1 = not reached. A pass reads depth_in and writes depth_out for every vertex
// (two buffers: a pass reads only the previous pass's depths, whatever order its threads run in);
// the caller enqueues pass p with depth_in = buffer p % 2, depth_out = buffer 1 - p % 2, each pass
// as slices [v_begin, v_end) in order, the last ending at `vertices`. At level L = state->level:
//   L == -1 (a traversal's first pass): depth_out[v] = v == state->source ? 0 : -1.
//   L >= 0: depth_out[v] = depth_in[v] where that is >= 0; else L + 1 when some in-neighbour u has
//   depth_in[u] == L (in-edges read in CSR order up to the first such u), else -1.
// The slice's newly reached vertices and in-edges read go to state->found and state->edges (integer
// sums: the same in any order). A slice ending at `vertices` ends the pass: found > 0 records the
// level's size and goes on to level L + 1; found == 0 ends the traversal (its record written, the
// next one's source first_source + t mod vertices, level -1), and after `traversals` traversals sets
// done. Once done every later step does nothing, so a caller enqueues passes before it knows. The
// caller starts the state as BfsState{} with source = first_source. The depths are exactly a
// serial BFS's (they do not depend on visit order).
inline constexpr std::uint32_t kBfsRecordedLevels = 256;  // level sizes kept per recorded traversal

struct BfsState {
  std::int64_t traversal = 0;    // the running traversal (traversals once done)
  std::int32_t level = -1;       // the running pass's level (-1: the traversal's first pass)
  std::uint32_t done = 0;        // 1: every traversal ended; later steps are no-ops
  std::uint64_t source = 0;      // the running traversal's source
  std::uint64_t found = 0;       // vertices the running pass's slices reached so far
  std::uint64_t reached = 0;     // the running traversal's reached vertices (complete passes)
  std::uint64_t edges = 0;       // in-edges the running traversal read so far
  std::uint64_t edges_total = 0; // in-edges every ended traversal read
  std::uint64_t passes = 0;      // complete passes: the last one wrote buffer passes % 2
};

// One ended traversal, as the report lists it.
struct BfsTraversalRecord {
  std::uint64_t source, reached, levels, edges;
};

struct BfsStep {
  const std::uint64_t* offsets;  // [vertices + 1]
  const std::uint32_t* sources;  // [edges]
  std::uint32_t vertices;
  const std::int32_t* depth_in;
  std::int32_t* depth_out;
  BfsState* state;               // in the op's memory, written by bfs_step only (after its start)
  BfsTraversalRecord* records;   // [record_capacity]: traversal t's record when t < record_capacity
  std::uint64_t* level_sizes;    // [record_capacity][kBfsRecordedLevels]: vertices at each depth
  std::uint32_t record_capacity;
  std::uint64_t first_source;
  std::int64_t traversals;
  std::uint32_t v_begin, v_end;  // the slice: a caller bounds a step's edges by it
};

// ---- Graph SGD: a slice of Gardenia's matrix factorisation over the edges (the graphsgd lane) ----
// Graph: a CSR by source (edge e of row u rates item items[e] with ratings[e]); user and item hold
// latent_dim floats per vertex. pass 0 (update) visits edges [edge_begin, edge_end) in order, each
// from the vectors the previous edge wrote:
//   err = ratings[e] - <p_u, q_v>;  p_u[k] += lr * (err * q_v[k] - lambda * p_u[k]);
//   q_v[k] += lr * (err * p_u[k] - lambda * q_v[k])   (the old p_u[k], q_v[k] on the right)
// pass 1 (RMSE) adds err^2 (in double, in edge order) to state->squared_error. A slice ending at
// `edges` ends its pass: the update pass's sets squared_error = 0; the RMSE pass's ends the
// iteration: rmse = sqrt(squared_error / edges), recorded in rmse_history while there is room,
// iterations + 1, done = iterations >= max_iterations || rmse < tolerance. row_begin
// is the row of edge_begin (offsets[row_begin] <= edge_begin). Once done later steps do nothing.
// Serial by definition (edge i reads what edge i - 1 wrote): the CPU backend's loop is the
// graphsgd lane's host loop, bit for bit; a device runs it as one warp with the latent dimensions
// across its lanes, whose dot product (a fixed butterfly) rounds differently from the sequential
// sum: deterministic, not the CPU's bits (tests/cuda/test_cuda_graph_ops.cpp bounds the difference).
struct GraphSgdState {
  double squared_error = 0;   // the RMSE pass's sum so far (the last one's until an update pass ends)
  double rmse = 0;            // the last complete iteration's
  std::uint64_t edges = 0;    // edge visits of the steps that ran (both passes)
  std::int64_t iterations = 0;
  std::uint32_t done = 0;
};

struct GraphSgdStep {
  const std::uint64_t* offsets;  // [vertices + 1]
  const std::uint32_t* items;    // [edges]
  const float* ratings;          // [edges]
  std::uint32_t vertices;
  std::uint64_t edges;
  float* user;                   // [vertices * latent_dim]
  float* item;
  int latent_dim;                // 1 .. 1024
  float learning_rate, lambda;
  GraphSgdState* state;          // in the op's memory
  double* rmse_history;          // [history_capacity]
  std::uint32_t history_capacity;
  double tolerance;
  std::int64_t max_iterations;
  std::uint32_t pass;            // 0 update, 1 RMSE
  std::uint32_t row_begin;
  std::uint64_t edge_begin, edge_end;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu (2 threads)", "cuda:0 (NVIDIA H200)"
  virtual int threads() const = 0;       // CPU worker threads its kernels use (GPU: 0)

  // --- memory ---
  // An arena of `bytes` (hard quota) in memory of `kind`. ArenaQuotaError if it cannot be had.
  virtual std::unique_ptr<Arena> create_arena(std::string name, std::size_t bytes,
                                              MemoryKind kind = MemoryKind::Device) = 0;
  // Copies between any two memories of this backend (host, pinned, device), ordered on `stream`.
  // With a host pointer involved, stream.synchronize() before reading or reusing it.
  virtual void copy(void* dst, const void* src, std::size_t bytes, Stream& stream) = 0;
  virtual void memset_zero(void* dst, std::size_t bytes, Stream& stream) = 0;

  // --- streams and events ---
  virtual std::unique_ptr<Stream> create_stream(StreamPriority priority) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;

  // --- the op table ---
  // Whether the op can run on buffers of `dtype` (every backend: F32 for every op but the casts;
  // BF16 what has_bf16_buffer says: the casts, the attention's activations (probabilities, output,
  // q/k/v), the norms' output and their backward's input, GeLU's and SwiGLU's output and their
  // backward's input, and the GEMMs' weights and inputs under bf16 compute).
  virtual bool supports(OpKind op, DType dtype) const = 0;
  // F32, or BF16: the matmul family's GEMM operands rounded to bf16 (see the top of this file).
  virtual DType compute_precision() const = 0;

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte,
                                 const float* wpe, int B, int T, int C, Stream& s) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const std::int32_t* tokens, int B, int T, int C, Stream& s) = 0;
  // Vocab-parallel embedding: out[n,:] = wte_local[tokens[n] - v0,:] for tokens in
  // [v0, v0 + vcount), exact zeros for the others (an all-reduce then adds one rank's row to
  // zeros: the same bits as an unsplit lookup).
  virtual void embedding_lookup_local(float* out, const std::int32_t* tokens, const float* wte,
                                      int N, int C, int v0, int vcount, Stream& s) = 0;
  virtual void add_positions(float* out, const float* wpe, int B, int T, int C, Stream& s) = 0;
  // Backward of the two above: dwpe for every position, dwte only for this rank's rows; the same
  // summation order as embedding_backward.
  virtual void embedding_backward_local(float* dwte, float* dwpe, const float* dout,
                                        const std::int32_t* tokens, int B, int T, int C, int v0,
                                        int vcount, Stream& s) = 0;

  // Layernorm over the last dimension, eps 1e-5; mean/rstd saved for backward. `out` may be a
  // bf16 buffer (writes_bf16_norm): the fp32 result rounded.
  virtual void layernorm_forward(ActivationOut out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C,
                                 Stream& s) = 0;
  // The backward's `inp` may be a bf16 buffer (reads_bf16_norm_input): widened as it is read.
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  ActivationIn inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, Stream& s) = 0;
  // The two halves of layernorm_backward (zero-bubble split backward), bit-identical together.
  virtual void layernorm_backward_input(float* dinp, const float* dout, ActivationIn inp,
                                        const float* weight, const float* mean, const float* rstd,
                                        int N, int C, Stream& s) = 0;
  virtual void layernorm_backward_params(float* dweight, float* dbias, const float* dout,
                                         ActivationIn inp, const float* mean, const float* rstd,
                                         int N, int C, Stream& s) = 0;

  // out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] (bias may be null): nn.Linear's layout.
  // Under bf16 compute `inp` may be a bf16 buffer (reads_bf16_gemm_input; it holds what the GEMM
  // would round an fp32 input to: the same bits); in fp32 compute a bf16 input is
  // std::invalid_argument.
  virtual void matmul_forward(float* out, ActivationIn inp, GemmWeight weight, const float* bias,
                              int N, int C, int OC, Stream& s) = 0;
  // dinp (=, may be null), dweight (+=), dbias (+=, may be null). `inp` as matmul_forward's.
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               ActivationIn inp, GemmWeight weight, int N, int C, int OC,
                               Stream& s) = 0;
  // Only dinp (=), bit-identical to matmul_backward's.
  virtual void matmul_backward_input(float* dinp, const float* dout, GemmWeight weight, int N,
                                     int C, int OC, Stream& s) = 0;
  // The MLP's first layer with its GeLU: pre = inp @ weight^T + bias (kept for backward), out =
  // gelu(pre). By default the two ops; the CUDA backend fuses the GeLU into the GEMM's epilogue
  // (cuBLASLt's GELU_AUX_BIAS) where the width fits. `out` may be a bf16 buffer, as gelu_forward's.
  virtual void matmul_gelu_forward(float* pre, ActivationOut out, ActivationIn inp, GemmWeight weight,
                                   const float* bias, int N, int C, int OC, Stream& s) {
    matmul_forward(pre, inp, weight, bias, N, C, OC, s);
    gelu_forward(out, pre, static_cast<std::size_t>(N) * OC, s);
  }
  // The input gradient of a layer whose input was gelu(pre), through the GeLU: dpre (=) =
  // (dout @ weight) * gelu'(pre). By default the two ops; fused by the CUDA backend (DGELU). `pre`
  // may be a bf16 buffer (reads_bf16_activation), as gelu_backward's `inp`.
  virtual void matmul_backward_input_dgelu(float* dpre, const float* dout, GemmWeight weight,
                                           ActivationIn pre, int N, int C, int OC, Stream& s) {
    matmul_backward_input(dpre, dout, weight, N, C, OC, s);
    gelu_backward(dpre, pre, dpre, static_cast<std::size_t>(N) * C, s);
  }

  // Causal multi-head attention on a fused qkv[B,T,3C] laid out [q | k | v]. `att` holds
  // attention_saved_floats() floats the forward keeps for backward: the probabilities
  // [B,NH,T,T], or less (the CUDA backend's cuDNN attention keeps the softmax statistics
  // [B,NH,T] and recomputes the rest from qkv and out).
  virtual std::size_t attention_saved_floats(int B, int T, int C, int NH) const {
    (void)C;
    return static_cast<std::size_t>(B) * NH * T * T;
  }
  // `att` and `out` may be bf16 buffers (supports(AttentionForward, BF16); keeps_bf16_probabilities):
  // the probabilities (and the output) computed in fp32 and rounded as they are stored; so may
  // `qkv`, widened as it is read.
  virtual void attention_forward(ActivationOut out, ActivationOut att, ActivationIn qkv, int B, int T, int C,
                                 int NH, Stream& s) = 0;
  // `out` is the forward's output, unchanged since (a bf16 buffer too, as `att` and `qkv`, where it
  // was one).
  virtual void attention_backward(float* dqkv, const float* dout, ActivationIn qkv,
                                  ActivationIn out, ActivationIn att, int B, int T, int C, int NH,
                                  Stream& s) = 0;
  // Incremental (KV-cache) causal attention for inference: qkv[n,3C] holds positions
  // [past, past + n) of one sequence; their K and V are appended to k_cache/v_cache ([max_T, C])
  // and each position attends to every cached position up to itself. scores holds n*NH*(past+n)
  // floats.
  virtual void attention_forward_kv(float* out, float* scores, const float* qkv, float* k_cache,
                                    float* v_cache, int past, int n, int C, int NH,
                                    Stream& s) = 0;

  // GeLU (tanh form). `out` may be a bf16 buffer (writes_bf16_activation): the fp32 result rounded.
  virtual void gelu_forward(ActivationOut out, const float* inp, std::size_t n, Stream& s) = 0;
  // dinp (=); `inp` may be a bf16 buffer (reads_bf16_activation): widened as it is read.
  virtual void gelu_backward(float* dinp, ActivationIn inp, const float* dout, std::size_t n, Stream& s) = 0;
  // out = a + b, element by element: `out` may be `a` or `b` (bf16 storage adds in place).
  virtual void add(float* out, const float* a, const float* b, std::size_t n, Stream& s) = 0;
  virtual void add_inplace(float* acc, const float* x, std::size_t n, Stream& s) = 0;
  // out[n,:] += bias[:]
  virtual void add_bias(float* out, const float* bias, int N, int C, Stream& s) = 0;
  virtual void scale(float* x, float factor, std::size_t n, Stream& s) = 0;
  // Sum of squares in double over a fixed partition; waits for the stream (returns a value).
  virtual double sum_squares(const float* x, std::size_t n, Stream& s) = 0;
  // sums[i] = sum_squares(xs[i], ns[i]) for i < count, each equal to it bit for bit, with one
  // wait for the stream in all (the gradient norm's hundreds of tensors cost one host copy on a
  // GPU, not one synchronisation each). This default calls sum_squares per slice.
  virtual void sum_squares_each(double* sums, const float* const* xs, const std::size_t* ns,
                                std::size_t count, Stream& s) {
    for (std::size_t i = 0; i < count; ++i) sums[i] = sum_squares(xs[i], ns[i], s);
  }

  // logits[N,Vp] = x[N,C] @ wte[Vp,C]^T (the tied head, for inference and inspection).
  virtual void lm_head_logits(float* logits, const float* x, GemmWeight wte, int N, int C,
                              int Vp, Stream& s) = 0;
  // Scratch floats the fused head needs: never all logits, one bounded block of rows at a time.
  virtual std::size_t lm_head_scratch_floats(int N, int Vp) const = 0;
  // The tied head fused with softmax cross-entropy over columns < V. losses[N] per position;
  // when dx is non-null also backward of d(sum(losses) * grad_scale): dx (=), dwte (+=).
  // Returns the sum of losses (double); waits for the stream.
  virtual double lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x,
                                       GemmWeight wte, const std::int32_t* targets, int N, int C,
                                       int V, int Vp, float grad_scale, float* scratch,
                                       Stream& s) = 0;
  // The vocab-parallel head (Megatron): this rank holds wte rows [vocab_begin, +vocab_count).
  virtual std::size_t lm_head_vocab_parallel_scratch_floats(int N, int vocab_count) const = 0;
  virtual double lm_head_cross_entropy_vocab_parallel(
      float* losses, float* dx, float* dwte, const float* x, GemmWeight wte,
      const std::int32_t* targets, int N, int C, int V, int vocab_begin, int vocab_count,
      float grad_scale, float* scratch, const GroupReduce& reduce, Stream& s) = 0;

  // grad_scale multiplies the gradient first (global-norm clipping).
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                            const AdamWParams& h, float grad_scale, Stream& s) = 0;

  // One slice of a PageRank power iteration (above); every buffer, state included, in this
  // backend's memory (device memory on a GPU). Stream-ordered, never waits.
  virtual void pagerank_step(const PagerankStep& step, Stream& s) = 0;
  // One slice of a pull BFS pass / of a graph SGD pass (above); buffers in this backend's memory.
  // Stream-ordered, never wait.
  virtual void bfs_step(const BfsStep& step, Stream& s) = 0;
  virtual void graphsgd_step(const GraphSgdStep& step, Stream& s) = 0;

  // ---- bf16 storage ([train] storage = bf16: activations kept and sent in bf16; see
  // model/gpt_model.h). A bf16 buffer holds std::uint16_t: the top half of the fp32 bit pattern.
  // out[i] = in[i] rounded to the nearest bf16, ties to even; a NaN stays a NaN (its sign and
  // quiet bit kept; the payload may change), infinities stay infinite.
  virtual void cast_to_bf16(std::uint16_t* out, const float* in, std::size_t n, Stream& s) = 0;
  // out[i] = in[i] in fp32: exact (every bf16 is an fp32).
  virtual void cast_from_bf16(float* out, const std::uint16_t* in, std::size_t n, Stream& s) = 0;
  // x[i] = x[i] rounded to the nearest bf16 as cast_to_bf16 rounds, kept in fp32: the values bf16
  // storage would give back, where nothing is stored (a recomputed layer).
  virtual void round_to_bf16(float* x, std::size_t n, Stream& s) = 0;

  // Best sustained fp32 matmul throughput over `reps` n x n x n products, in GFLOP/s: a measured
  // peak for MFU.
  virtual double measure_matmul_gflops(int n, int reps) = 0;

  // ---- The Llama family's ops. Their defaults throw std::logic_error: a backend that lacks
  // them says so in supports(), and the model refuses such a backend up front. fp32 whatever the
  // compute precision, except the GQA attention's two products, which round their operands to
  // bf16 under BF16 as attention_forward/backward do.

  // RMSNorm over the last dimension: out = weight * x * rstd, rstd = 1 / sqrt(mean(x^2) + eps)
  // (saved for backward), Hugging Face's LlamaRMSNorm in fp32. `out` as layernorm_forward's.
  virtual void rmsnorm_forward(ActivationOut out, float* rstd, const float* inp, const float* weight, int N, int C,
                               float eps, Stream& s) {
    (void)out, (void)rstd, (void)inp, (void)weight, (void)N, (void)C, (void)eps, (void)s;
    unsupported("rmsnorm_forward");
  }
  // dinp (+=, a residual stream's gradient, like layernorm's), dweight (+=); `inp` as layernorm_backward's.
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, ActivationIn inp,
                                const float* weight, const float* rstd, int N, int C, Stream& s) {
    rmsnorm_backward_input(dinp, dout, inp, weight, rstd, N, C, s);
    rmsnorm_backward_params(dweight, dout, inp, rstd, N, C, s);
  }
  // The two halves of rmsnorm_backward (zero-bubble split backward), bit-identical together.
  virtual void rmsnorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight,
                                      const float* rstd, int N, int C, Stream& s) {
    (void)dinp, (void)dout, (void)inp, (void)weight, (void)rstd, (void)N, (void)C, (void)s;
    unsupported("rmsnorm_backward_input");
  }
  virtual void rmsnorm_backward_params(float* dweight, const float* dout, ActivationIn inp, const float* rstd,
                                       int N, int C, Stream& s) {
    (void)dweight, (void)dout, (void)inp, (void)rstd, (void)N, (void)C, (void)s;
    unsupported("rmsnorm_backward_params");
  }

  // Rotary position embedding in place, Hugging Face's rotate-half convention: row n = b*T + t of
  // x (B*T rows, `ld` floats apart) is at position pos0 + t; in each of its `heads` heads (hs
  // columns from h*hs, hs even) the pairs (i, i + hs/2) turn by the angle whose cos and sin are
  // table[p*hs + i] and table[p*hs + hs/2 + i] (the stage's table, computed once from rope_theta
  // and the scaling: model/rope_table.h). Applied to q and to k separately.
  virtual void rope_forward(float* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                            Stream& s) {
    (void)x, (void)table, (void)B, (void)T, (void)pos0, (void)heads, (void)hs, (void)ld, (void)s;
    unsupported("rope_forward");
  }
  // Its input gradient in place: the inverse rotation (the transpose) of the gradient.
  virtual void rope_backward(float* dx, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                             Stream& s) {
    (void)dx, (void)table, (void)B, (void)T, (void)pos0, (void)heads, (void)hs, (void)ld, (void)s;
    unsupported("rope_backward");
  }

  // out = silu(gate) * up elementwise (silu(x) = x / (1 + exp(-x))); dgate and dup (=). `out` may be
  // a bf16 buffer (writes_bf16_activation): the fp32 result rounded.
  virtual void swiglu_forward(ActivationOut out, const float* gate, const float* up, std::size_t n, Stream& s) {
    (void)out, (void)gate, (void)up, (void)n, (void)s;
    unsupported("swiglu_forward");
  }
  // `gate` and `up` may be bf16 buffers (reads_bf16_activation): widened as they are read.
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, ActivationIn gate, ActivationIn up,
                               std::size_t n, Stream& s) {
    (void)dgate, (void)dup, (void)dout, (void)gate, (void)up, (void)n, (void)s;
    unsupported("swiglu_backward");
  }

  // Causal grouped-query attention on separate q [B,T,NH*hs] and k, v [B,T,KVH*hs] (KVH divides
  // NH): query head h reads kv head h / (NH / KVH), nothing is repeated. out [B,T,NH*hs]; att
  // holds attention_gqa_saved_floats() floats for backward (the probabilities [B,NH,T,T]).
  virtual std::size_t attention_gqa_saved_floats(int B, int T, int NH, int hs) const {
    (void)hs;
    return static_cast<std::size_t>(B) * NH * T * T;
  }
  // `out`, `att` and q, k, v as attention_forward's.
  virtual void attention_forward_gqa(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k,
                                     ActivationIn v, int B, int T, int NH, int KVH, int hs, Stream& s) {
    (void)out, (void)att, (void)q, (void)k, (void)v, (void)B, (void)T, (void)NH, (void)KVH, (void)hs, (void)s;
    unsupported("attention_forward_gqa");
  }
  // dq, dk, dv (=); `out` is the forward's output, unchanged since (as attention_backward's).
  virtual void attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q,
                                      ActivationIn k, ActivationIn v, ActivationIn out, ActivationIn att, int B,
                                      int T, int NH, int KVH, int hs, Stream& s) {
    (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)att, (void)B, (void)T,
        (void)NH, (void)KVH, (void)hs, (void)s;
    unsupported("attention_backward_gqa");
  }
  // attention_forward_kv with GQA: q [n, NH*hs], k, v [n, KVH*hs] of positions [past, past + n) of
  // one sequence; k and v are appended to k_cache/v_cache ([max_T, KVH*hs]). scores holds
  // n*NH*(past+n) floats. Plain softmax, position order: bit-identical however it is chunked.
  virtual void attention_forward_kv_gqa(float* out, float* scores, const float* q, const float* k,
                                        const float* v, float* k_cache, float* v_cache, int past, int n, int NH,
                                        int KVH, int hs, Stream& s) {
    (void)out, (void)scores, (void)q, (void)k, (void)v, (void)k_cache, (void)v_cache, (void)past, (void)n,
        (void)NH, (void)KVH, (void)hs, (void)s;
    unsupported("attention_forward_kv_gqa");
  }

  // The backward of a token lookup without position table (embedding_lookup_local): dwte rows
  // of tokens in [v0, v0 + vcount) += their dout rows, in row order (embedding_backward's sums).
  virtual void embedding_backward_tokens(float* dwte, const float* dout, const std::int32_t* tokens, int N, int C,
                                         int v0, int vcount, Stream& s) {
    (void)dwte, (void)dout, (void)tokens, (void)N, (void)C, (void)v0, (void)vcount, (void)s;
    unsupported("embedding_backward_tokens");
  }

  // ---- The CNN lanes' ops (above the Backend class: NHWC rows, blocks of output rows). Their
  // defaults throw std::logic_error (supports() says no). fp32 whatever the compute precision.

  // cols[(r - r0) * K + (kh * kernel + kw) * c + ic] = the input at (n, oh*stride - pad + kh,
  // ow*stride - pad + kw, ic) of output row r = (n*out_h + oh)*out_w + ow, 0 in the padding;
  // K = kernel^2 * c (a convolution's weight stored [OC][KH][KW][IC] is then nn.Linear's).
  virtual void cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                          Stream& s) {
    (void)cols, (void)in, (void)g, (void)r0, (void)r1, (void)s;
    unsupported("cnn_im2col");
  }
  // Its transpose: din (+=) gets every dcols element back where im2col took it from.
  virtual void cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                          Stream& s) {
    (void)din, (void)dcols, (void)g, (void)r0, (void)r1, (void)s;
    unsupported("cnn_col2im");
  }
  // Three phases over rows [r0, r1), sums in double, rows ascending: 0 sum_a += x (the block at
  // row 0 first zeroes sum_a); 1 (at row 0: mean = float(sum_a / M), sum_a = 0) sum_a += (x -
  // mean)^2; 2 (at row 0: rstd = float(1 / sqrt(sum_a / M + eps)), var_unbiased = float(sum_a /
  // (M - 1)), 0 when M = 1) y = (x - mean) * rstd * weight + bias.
  virtual void batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1,
                                  Stream& s) {
    (void)phase, (void)t, (void)r0, (void)r1, (void)s;
    unsupported("batch_norm_forward");
  }
  // Two phases, xhat = (x - mean) * rstd in fp32: 0 sum_a += dy, sum_b += dy * xhat (zeroed at row
  // 0); 1 (at row 0: dweight += float(sum_b), dbias += float(sum_a)) dx += weight * rstd * (dy -
  // float(sum_a / M) - xhat * float(sum_b / M)).
  virtual void batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1,
                                   Stream& s) {
    (void)phase, (void)t, (void)r0, (void)r1, (void)s;
    unsupported("batch_norm_backward");
  }
  // running = (1 - momentum) * running + momentum * batch, for the mean and the unbiased variance.
  virtual void batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                            const float* var_unbiased, int C, float momentum, Stream& s) {
    (void)running_mean, (void)running_var, (void)mean, (void)var_unbiased, (void)C, (void)momentum, (void)s;
    unsupported("batch_norm_update_statistics");
  }
  // nn.MaxPool2d over output rows [r0, r1): out and argmax[r * c + ch] = the index (in [n,h,w,c])
  // of the first maximum in row-major window order, padding skipped (a NaN first cell stays).
  virtual void max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g,
                                std::int64_t r0, std::int64_t r1, Stream& s) {
    (void)out, (void)argmax, (void)in, (void)g, (void)r0, (void)r1, (void)s;
    unsupported("max_pool_forward");
  }
  // din[argmax[i]] += dout[i] for the outputs i of rows [r0, r1).
  virtual void max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                                 std::int64_t r0, std::int64_t r1, Stream& s) {
    (void)din, (void)dout, (void)argmax, (void)g, (void)r0, (void)r1, (void)s;
    unsupported("max_pool_backward");
  }
  // nn.AdaptiveAvgPool2d: output (oh, ow) averages input rows [floor(oh*h/out_h), ceil((oh+1)*h/out_h))
  // and the same for columns (fp32 sum in row-major order, then one division).
  virtual void adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0,
                                         std::int64_t r1, Stream& s) {
    (void)out, (void)in, (void)g, (void)r0, (void)r1, (void)s;
    unsupported("adaptive_avg_pool_forward");
  }
  // din (+=) gets dout / (the window's cell count) in every cell of each output's window.
  virtual void adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                          std::int64_t r1, Stream& s) {
    (void)din, (void)dout, (void)g, (void)r0, (void)r1, (void)s;
    unsupported("adaptive_avg_pool_backward");
  }
  // In place: x = x > 0 ? x : 0 (NaN -> 0, as the select does).
  virtual void relu_forward(float* x, std::size_t n, Stream& s) {
    (void)x, (void)n, (void)s;
    unsupported("relu_forward");
  }
  // In place, given the forward's output y: dx = y > 0 ? dx : 0.
  virtual void relu_backward(float* dx, const float* y, std::size_t n, Stream& s) {
    (void)dx, (void)y, (void)n, (void)s;
    unsupported("relu_backward");
  }
  // Inverted dropout in place: x[i] = 0 when u(first + i) < p, else x[i] * (1 / (1 - p)), with
  // u(k) = (splitmix64(stream + k) >> 40) * 2^-24 compared in double (splitmix64: z += 0x9E37...,
  // the finaliser of lanes/builtin/cnn/cnn_random.h's mix64). The mask is a function of (stream,
  // index) alone, so backward applies the same one to the gradient.
  virtual void dropout(float* x, std::size_t n, std::uint64_t stream, std::uint64_t first, float p, Stream& s) {
    (void)x, (void)n, (void)stream, (void)first, (void)p, (void)s;
    unsupported("dropout");
  }
  // nn.CrossEntropyLoss (mean over n rows) of logits [n, classes]: returns the loss, and writes
  // dlogits (=) = (softmax - onehot) / n; log-sum-exp in double within a row, rows summed in order.
  // labels in this backend's memory or host memory. Waits for the stream (returns a value).
  virtual double classifier_cross_entropy(float* dlogits, const float* logits, const std::int32_t* labels, int n,
                                          int classes, Stream& s) {
    (void)dlogits, (void)logits, (void)labels, (void)n, (void)classes, (void)s;
    unsupported("classifier_cross_entropy");
  }
  // torch.optim.SGD's step on the buffer `momentum`: d = grad + weight_decay * param; momentum =
  // h.momentum * momentum + d; param -= lr * momentum; then grad = 0 (ready for the next step's
  // accumulation). A first step from a zero buffer is torch's buf = d.
  virtual void sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n,
                                   const SgdMomentumParams& h, Stream& s) {
    (void)param, (void)grad, (void)momentum, (void)n, (void)h, (void)s;
    unsupported("sgd_momentum_update");
  }

 protected:
  [[noreturn]] void unsupported(const char* op) const {
    throw std::logic_error(name() + " has no " + op + " (supports() says so)");
  }
  // The fp32 weight of a GEMM in fp32 compute; a bf16 one is for bf16 compute only (GemmWeight).
  const float* fp32_weight(GemmWeight w, const char* op) const {
    if (w.is_bf16())
      throw std::invalid_argument(name() + ": " + op + " got a bf16 weight; bf16 weights need bf16 compute");
    return w.f32;
  }
  // The fp32 input of a GEMM in fp32 compute; a bf16 one is for bf16 compute only (ActivationIn).
  const float* fp32_input(ActivationIn x, const char* op) const {
    if (x.is_bf16())
      throw std::invalid_argument(name() + ": " + op + " got a bf16 input; bf16 inputs need bf16 compute");
    return x.f32;
  }
};

}  // namespace pipelane
