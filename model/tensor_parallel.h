// Megatron-style tensor parallelism, as the model sees it: one rank's view of its tensor-parallel
// group. The model calls only these collectives and never knows how they are carried (MPI in
// parallel/, threads in tests/model/thread_tp_comm.h).
//
// What a GptStage built with a TensorParallelComm of size tp > 1 does (see model/README.md):
// - attention heads and MLP hidden units are split across the tp ranks: c_attn and c_fc are
//   column-parallel (rank r holds the q, k and v rows of heads [r*NH/tp, (r+1)*NH/tp), and hidden
//   units [r*4C/tp, (r+1)*4C/tp)), attn.c_proj and mlp.c_proj are row-parallel (the matching
//   input columns); the partial outputs of a row-parallel layer are all-reduced, its bias is added
//   once after the reduce, and the input gradient of a column-parallel layer is all-reduced;
// - wte is vocab-parallel: rank r holds rows [r*Vp/tp, (r+1)*Vp/tp) of the padded table; the
//   embedding lookup and the fused head + cross-entropy all-reduce what they need;
// - LayerNorms, wpe and the row-parallel biases are replicated. Their gradients are identical on
//   every rank by construction and are never all-reduced (ParamEntry::shard_dim == -1), except the
//   norms' under sequence parallelism (GptStage::reduce_sequence_parallel_gradients);
// - with sequence parallelism (Korthikanti et al. 2022) the residual stream between the blocks is
//   split by rows instead of replicated: the all-reduce after a row-parallel layer becomes a
//   reduce-scatter, and the norm's output is all-gathered before a column-parallel layer.
// How each tensor is cut from the full model's tensor is recorded in ParamEntry (gpt_layout.h).
#pragma once
#include <cstddef>

namespace pipelane {

class TensorParallelComm {  // one rank's view of its tensor-parallel group
 public:
  virtual ~TensorParallelComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Element-wise over the group, in place; every rank must call with the same n, in the same
  // order. Implementations must be deterministic (a fixed summation order, e.g. rank order) and
  // leave bit-identical results on every rank: the model relies on that to keep replicated
  // tensors identical without ever reducing them.
  virtual void all_reduce_sum(float* data, std::size_t n) = 0;
  virtual void all_reduce_max(float* data, std::size_t n) = 0;
  // Sequence parallelism's pair. all_gather: out[size() * n] is every rank's in[n], in rank order
  // (in and out must not overlap). reduce_scatter_sum, in place as MPI's: `data` holds size()
  // blocks of n floats; afterwards data[0, n) is block rank() of the element-wise sum over the
  // group, summed in the same fixed order as all_reduce_sum, and the rest of `data` is undefined.
  virtual void all_gather(const float* in, float* out, std::size_t n) = 0;
  virtual void reduce_scatter_sum(float* data, std::size_t n) = 0;
};

}  // namespace pipelane
