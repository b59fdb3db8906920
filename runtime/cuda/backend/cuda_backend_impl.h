// The CudaBackend class (private to runtime/cuda/): construction, memory, streams and the simple
// ops in cuda_backend.cpp; matmuls, attention and the LM head in cuda_backend_ops.cpp.
#pragma once
#include <atomic>
#include <cuda_runtime_api.h>
#include <functional>

#include <initializer_list>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/backend/attention_engine.h"
#include "runtime/cuda/backend/cuda_memory.h"
#include "runtime/cuda/backend/cuda_streams.h"
#include "runtime/cuda/backend/gemm_engine.h"
#include "runtime/cuda/backend/sm_partition.h"
#include "runtime/cuda/cuda_backend.h"

namespace pipelane::cuda {

// Elements of a [rows, cols] matrix.
inline std::size_t count(int rows, int cols) { return static_cast<std::size_t>(rows) * cols; }

// Token ids an op reads: used in place when they are device memory, else copied to a temporary
// in the op's stream order (the model hands host arrays of ids; a copy from pageable memory takes
// the source at the call, so the caller may reuse it at once).
class DeviceInts {
 public:
  DeviceInts(ScratchPool& pool, const std::int32_t* ids, std::size_t n, cudaStream_t stream);
  const std::int32_t* get() const { return ptr_; }

 private:
  std::unique_ptr<Temp<std::int32_t>> staged_;
  const std::int32_t* ptr_;
};

class CudaBackendImpl;

// bf16 compute's GEMM types: bf16 operands, fp32 output.
inline const GemmTypes kAutocast{DataType::BF16, DataType::F32};

// A bf16 copy of n fp32 values (a GEMM operand in bf16 compute), in the op's stream order.
class Bf16Copy {
 public:
  Bf16Copy(ScratchPool& pool, const float* src, std::size_t n, cudaStream_t stream);
  const __nv_bfloat16* get() const { return t_.get(); }

 private:
  Temp<__nv_bfloat16> t_;
};

// A GEMM operand in bf16: a bf16 weight (GemmWeight) or input (ActivationIn) as it is (no copy),
// an fp32 one copied rounded (Bf16Copy).
class Bf16Operand {
 public:
  Bf16Operand(ScratchPool& pool, GemmWeight w, std::size_t n, cudaStream_t stream)
      : Bf16Operand(pool, w.f32, w.bf16, n, stream) {}
  Bf16Operand(ScratchPool& pool, ActivationIn x, std::size_t n, cudaStream_t stream)
      : Bf16Operand(pool, x.f32, x.bf16, n, stream) {}
  const __nv_bfloat16* get() const { return w_; }

 private:
  Bf16Operand(ScratchPool& pool, const float* f32, const std::uint16_t* bf16_bits, std::size_t n, cudaStream_t stream);
  std::unique_ptr<Bf16Copy> copy_;
  const __nv_bfloat16* w_;
};

// An input an fp32 kernel reads: an fp32 buffer as it is, a bf16 one (ActivationIn) widened into
// an fp32 temporary in the op's stream order. The fp32 kernel then gives the bits it gives after
// cast_from_bf16, by construction. (The norms' kernels widening as they read gave other low bits in
// their column sums under the emulator's host compiler, whose contraction into FMAs depends on
// the instantiation; a device compiler's may too.)
class Fp32Input {
 public:
  Fp32Input(ScratchPool& pool, ActivationIn x, std::size_t n, cudaStream_t stream);
  const float* get() const { return f32_; }

 private:
  std::unique_ptr<Temp<float>> widened_;
  const float* f32_;
};

// Rows of logits the fused head holds at once: one block of at most 128 MiB, as the CPU head.
int head_chunk_rows(int N, int width);

// The bf16 composed ops: the same templates as the fp32 ones, instantiated for bf16.
class CudaBf16OpsImpl final : public CudaBf16Ops {
 public:
  explicit CudaBf16OpsImpl(CudaBackendImpl& backend) : b_(backend) {}
  void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N, int C, int OC,
                      Stream& s) override;
  void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp, const bf16* weight,
                       int N, int C, int OC, Stream& s) override;
  void attention_forward(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH, Stream& s) override;
  void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int B, int T, int C, int NH,
                          Stream& s) override;
  double lm_head_cross_entropy(float* losses, bf16* dx, float* dwte, const bf16* x, const bf16* wte,
                               const std::int32_t* targets, int N, int C, int V, int Vp, float grad_scale,
                               bf16* scratch, Stream& s) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWParams& h,
                    float grad_scale, bf16* param_copy, Stream& s) override;

 private:
  CudaBackendImpl& b_;
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(const CudaBackendConfig& config, std::unique_ptr<GemmEngine> gemm,
                  std::unique_ptr<AttentionEngine> attention);
  ~CudaBackendImpl() override;

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return name_; }
  int threads() const override { return 0; }

  std::unique_ptr<Arena> create_arena(std::string name, std::size_t bytes, MemoryKind kind) override;
  std::unique_ptr<Arena> create_pool_arena(std::string name, std::size_t quota_bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes, Stream& stream) override;
  void memset_zero(void* dst, std::size_t bytes, Stream& stream) override;
  std::unique_ptr<Stream> create_stream(StreamPriority priority) override;
  std::unique_ptr<Event> create_event() override;
  bool supports(OpKind op, DType dtype) const override;
  DType compute_precision() const override { return config_.compute; }
  CudaBackendStats stats() const override;
  CudaBf16Ops& bf16_ops() override { return bf16_; }

  // The composed ops for storage type X (float or bf16); parameter gradients are fp32.
  template <typename X>
  void matmul_forward_t(X* out, const X* inp, const X* weight, const X* bias, int N, int C, int OC, Stream& s);
  template <typename X>
  void matmul_backward_t(X* dinp, float* dweight, float* dbias, const X* dout, const X* inp, const X* weight, int N,
                         int C, int OC, Stream& s);
  template <typename X>
  void attention_forward_t(X* out, X* att, const X* qkv, int B, int T, int C, int NH, Stream& s);
  template <typename X>
  void attention_backward_t(X* dqkv, const X* dout, const X* qkv, const X* att, int B, int T, int C, int NH,
                            Stream& s);
  template <typename X>
  double lm_head_cross_entropy_t(float* losses, X* dx, float* dwte, const X* x, const X* wte,
                                 const std::int32_t* targets, int N, int C, int V, int Vp, float grad_scale,
                                 X* scratch, Stream& s);
  template <typename X>
  void adamw_update_t(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWParams& h,
                      float grad_scale, X* param_copy, Stream& s);

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C, Stream& s) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                          int C, Stream& s) override;
  void embedding_lookup_local(float* out, const std::int32_t* tokens, const float* wte, int N, int C, int v0,
                              int vcount, Stream& s) override;
  void add_positions(float* out, const float* wpe, int B, int T, int C, Stream& s) override;
  void embedding_backward_local(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B,
                                int T, int C, int v0, int vcount, Stream& s) override;
  void layernorm_forward(ActivationOut out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C, Stream& s) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, ActivationIn inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C,
                          Stream& s) override;
  void layernorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight,
                                const float* mean, const float* rstd, int N, int C, Stream& s) override;
  void layernorm_backward_params(float* dweight, float* dbias, const float* dout, ActivationIn inp,
                                 const float* mean, const float* rstd, int N, int C, Stream& s) override;
  void matmul_forward(float* out, ActivationIn inp, GemmWeight weight, const float* bias, int N, int C, int OC,
                      Stream& s) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, ActivationIn inp,
                       GemmWeight weight, int N, int C, int OC, Stream& s) override;
  void matmul_backward_input(float* dinp, const float* dout, GemmWeight weight, int N, int C, int OC,
                             Stream& s) override;
  void matmul_gelu_forward(float* pre, ActivationOut out, ActivationIn inp, GemmWeight weight, const float* bias, int N,
                           int C, int OC, Stream& s) override;
  void matmul_backward_input_dgelu(float* dpre, const float* dout, GemmWeight weight, ActivationIn pre, int N,
                                   int C, int OC, Stream& s) override;
  void attention_forward(ActivationOut out, ActivationOut att, ActivationIn qkv, int B, int T, int C, int NH,
                         Stream& s) override;
  std::size_t attention_saved_floats(int B, int T, int C, int NH) const override;
  void attention_backward(float* dqkv, const float* dout, ActivationIn qkv, ActivationIn out, ActivationIn att, int B,
                          int T, int C, int NH, Stream& s) override;
  void attention_forward_kv(float* out, float* scores, const float* qkv, float* k_cache, float* v_cache, int past,
                            int n, int C, int NH, Stream& s) override;
  void gelu_forward(ActivationOut out, const float* inp, std::size_t n, Stream& s) override;
  void gelu_backward(float* dinp, ActivationIn inp, const float* dout, std::size_t n, Stream& s) override;
  void add(float* out, const float* a, const float* b, std::size_t n, Stream& s) override;
  void add_inplace(float* acc, const float* x, std::size_t n, Stream& s) override;
  void add_bias(float* out, const float* bias, int N, int C, Stream& s) override;
  void scale(float* x, float factor, std::size_t n, Stream& s) override;
  void cast_to_bf16(std::uint16_t* out, const float* in, std::size_t n, Stream& s) override;
  void cast_from_bf16(float* out, const std::uint16_t* in, std::size_t n, Stream& s) override;
  void round_to_bf16(float* x, std::size_t n, Stream& s) override;
  double sum_squares(const float* x, std::size_t n, Stream& s) override;
  void sum_squares_each(double* sums, const float* const* xs, const std::size_t* ns, std::size_t count,
                        Stream& s) override;
  void lm_head_logits(float* logits, const float* x, GemmWeight wte, int N, int C, int Vp, Stream& s) override;
  std::size_t lm_head_scratch_floats(int N, int Vp) const override;
  double lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x, GemmWeight wte,
                               const std::int32_t* targets, int N, int C, int V, int Vp, float grad_scale,
                               float* scratch, Stream& s) override;
  std::size_t lm_head_vocab_parallel_scratch_floats(int N, int vocab_count) const override;
  double lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte, const float* x,
                                              GemmWeight wte, const std::int32_t* targets, int N, int C, int V,
                                              int vocab_begin, int vocab_count, float grad_scale, float* scratch,
                                              const GroupReduce& reduce, Stream& s) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWParams& h,
                    float grad_scale, Stream& s) override;
  double measure_matmul_gflops(int n, int reps) override;
  void pagerank_step(const PagerankStep& step, Stream& s) override;  // cuda_backend_pagerank.cpp
  void bfs_step(const BfsStep& step, Stream& s) override;            // cuda_backend_graph.cpp
  void graphsgd_step(const GraphSgdStep& step, Stream& s) override;  // cuda_backend_graph.cpp

  // The Llama family's ops (cuda_backend_llama.cpp).
  void rmsnorm_forward(ActivationOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                       Stream& s) override;
  void rmsnorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight, const float* rstd,
                              int N, int C, Stream& s) override;
  void rmsnorm_backward_params(float* dweight, const float* dout, ActivationIn inp, const float* rstd, int N, int C,
                               Stream& s) override;
  void rope_forward(float* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                    Stream& s) override;
  void rope_backward(float* dx, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                     Stream& s) override;
  void swiglu_forward(ActivationOut out, const float* gate, const float* up, std::size_t n, Stream& s) override;
  void swiglu_backward(float* dgate, float* dup, const float* dout, ActivationIn gate, ActivationIn up, std::size_t n,
                       Stream& s) override;
  void attention_forward_gqa(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k, ActivationIn v,
                             int B, int T, int NH, int KVH, int hs, Stream& s) override;
  void attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q, ActivationIn k,
                              ActivationIn v, ActivationIn out, ActivationIn att, int B, int T, int NH, int KVH,
                              int hs, Stream& s) override;
  void attention_forward_kv_gqa(float* out, float* scores, const float* q, const float* k, const float* v,
                                float* k_cache, float* v_cache, int past, int n, int NH, int KVH, int hs,
                                Stream& s) override;
  void embedding_backward_tokens(float* dwte, const float* dout, const std::int32_t* tokens, int N, int C, int v0,
                                 int vcount, Stream& s) override;

  // The CNN lanes' ops (cuda_backend_cnn.cpp).
  void cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                  Stream& s) override;
  void cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                  Stream& s) override;
  void batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, Stream& s) override;
  void batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, Stream& s) override;
  void batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                    const float* var_unbiased, int C, float momentum, Stream& s) override;
  void max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g, std::int64_t r0,
                        std::int64_t r1, Stream& s) override;
  void max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                         std::int64_t r0, std::int64_t r1, Stream& s) override;
  void adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                                 Stream& s) override;
  void adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                  std::int64_t r1, Stream& s) override;
  void relu_forward(float* x, std::size_t n, Stream& s) override;
  void relu_backward(float* dx, const float* y, std::size_t n, Stream& s) override;
  void dropout(float* x, std::size_t n, std::uint64_t stream, std::uint64_t first, float p, Stream& s) override;
  double classifier_cross_entropy(float* dlogits, const float* logits, const std::int32_t* labels, int n,
                                  int classes, Stream& s) override;
  void sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n, const SgdMomentumParams& h,
                           Stream& s) override;

 private:
  bool bf16_compute() const { return config_.compute == DType::BF16; }
  // The matmul family in bf16 compute on fp32 storage (cuda_backend_autocast.cpp).
  void matmul_forward_autocast(float* out, ActivationIn inp, GemmWeight weight, const float* bias, int N, int C,
                               int OC, Stream& s);
  void matmul_backward_autocast(float* dinp, float* dweight, float* dbias, const float* dout, ActivationIn inp,
                                GemmWeight weight, int N, int C, int OC, Stream& s);
  void matmul_backward_input_autocast(float* dinp, const float* dout, GemmWeight weight, int N, int C, int OC,
                                      Stream& s);
  // An attention op on a bf16 probabilities buffer: `run` (the op on fp32 probabilities) on an
  // fp32 temporary of n floats, rounded into the buffer after it (forward) or widened from it
  // before (backward) by the bf16-storage casts' kernels: the bits of the fp32 op followed or
  // preceded by cast_to_bf16 / cast_from_bf16. The MHA ops under cuDNN keep statistics, not
  // probabilities: std::invalid_argument where supports(op, BF16) says no.
  void probabilities_into_bf16(OpKind op, std::uint16_t* att, std::size_t n, Stream& s,
                               const std::function<void(float*)>& run);
  void probabilities_from_bf16(OpKind op, const std::uint16_t* att, std::size_t n, Stream& s,
                               const std::function<void(const float*)>& run);
  void expect_bf16_probabilities(OpKind op) const;
  // An op writing an activation `out` of n floats: `run` (the op on an fp32 output) into it, or for
  // a bf16 buffer into an fp32 temporary rounded into it after (cast_to_bf16's kernel): the bits
  // of the fp32 op followed by the cast.
  void into_activation(ActivationOut out, std::size_t n, Stream& s, const std::function<void(float*)>& run);
  void attention_forward_autocast(float* out, float* att, const float* qkv, int B, int T, int C, int NH, Stream& s);
  void attention_backward_autocast(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                                   int C, int NH, Stream& s);
  // [model] attention = cudnn (cuda_backend_cudnn.cpp): att holds the softmax statistics.
  void attention_forward_cudnn(float* out, float* att, const float* qkv, int B, int T, int C, int NH, Stream& s);
  void attention_backward_cudnn(float* dqkv, const float* dout, const float* qkv, const float* out, const float* att,
                                int B, int T, int C, int NH, Stream& s);
  void lm_head_logits_autocast(float* logits, const float* x, GemmWeight wte, int N, int C, int Vp, Stream& s);
  double lm_head_cross_entropy_autocast(float* losses, float* dx, float* dwte, const float* x, GemmWeight wte,
                                        const std::int32_t* targets, int N, int C, int V, int Vp, float grad_scale,
                                        float* scratch, Stream& s);
  // The vocab-parallel head on GEMM operands x, wte of type O: float (fp32 compute) or bf16 copies
  // (bf16 compute, whose dlogits are copied too); logits fp32 either way.
  template <typename O>
  double lm_head_vocab_parallel_t(float* losses, float* dx, float* dwte, const O* x, const O* wte,
                                  const std::int32_t* targets, int N, int C, int V, int vocab_begin, int vocab_count,
                                  float grad_scale, float* scratch, const GroupReduce& reduce, Stream& s);

  // Makes this backend's device current on the calling thread and returns the op's stream.
  cudaStream_t enter(Stream& s) const;
  // With config.check_pointers: std::logic_error unless every non-null pointer is device memory.
  void expect_device(const char* op, std::initializer_list<const void*> buffers) const;
  // Runs g; false (nothing enqueued) when the engine has no algorithm for it.
  bool try_gemm(const GemmCall& g, Stream& s);
  // Runs g, a Bias epilogue the engine refuses as the GEMM plus the bias kernel; throws naming
  // the call when the engine has no algorithm for anything else.
  void gemm(const GemmCall& g, Stream& s);
  // The sum of n device floats in double, in index order (as the CPU ops sum their losses),
  // computed on the device: one 8-byte copy and one wait for the stream.
  double host_sum(const float* device, std::size_t n, cudaStream_t stream) const;

  CudaBackendConfig config_;
  std::unique_ptr<GemmEngine> gemm_;
  std::atomic<std::uint64_t> unfused_epilogues_{0};  // stats(): epilogues run as separate kernels
  std::unique_ptr<AttentionEngine> attention_;
  std::string name_;
  StreamPriorities priorities_{};
  int priority_least_ = 0, priority_greatest_ = 0;
  std::unique_ptr<DeviceMemory> device_memory_;
  PinnedMemory pinned_memory_;
  std::unique_ptr<ScratchPool> scratch_;
  std::unique_ptr<SmPartition> lane_partition_;
  CudaBf16OpsImpl bf16_{*this};
  std::mutex pools_mu_;
  std::vector<std::unique_ptr<PoolMemory>> pools_;  // one per pool arena, kept for the backend's life
};

}  // namespace pipelane::cuda
