#include "runtime/cpu/cpu_backend.h"

#include <omp.h>
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "runtime/cpu/bf16_gemm_choice.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/cpu_ops_cnn.h"
#include "runtime/cpu/onednn_bf16_gemm.h"

namespace pipelane {

void enable_flush_denormals_on_this_thread() {
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}

bool flush_denormals_enabled_on_this_thread() {
  return _MM_GET_FLUSH_ZERO_MODE() == _MM_FLUSH_ZERO_ON &&
         _MM_GET_DENORMALS_ZERO_MODE() == _MM_DENORMALS_ZERO_ON;
}

namespace {

class CpuStream final : public Stream {
 public:
  explicit CpuStream(StreamPriority p) : priority_(p) {}
  StreamPriority priority() const override { return priority_; }
  void synchronize() override {}

 private:
  StreamPriority priority_;
};

// Ops run synchronously on the calling thread, so an event completes when it is recorded.
class CpuEvent final : public Event {
 public:
  void record(Stream&) override {
    at_ = std::chrono::steady_clock::now();
    recorded_ = true;
  }
  bool query() const override { return recorded_; }
  void synchronize() override {}
  void wait_on(Stream&) override {}
  double elapsed_ms_since(const Event& earlier) const override {
    const auto* e = dynamic_cast<const CpuEvent*>(&earlier);
    if (!e || !e->recorded_ || !recorded_)
      throw std::logic_error("CpuEvent::elapsed_ms_since: both events must be recorded CPU events");
    return std::chrono::duration<double, std::milli>(at_ - e->at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_{};
  bool recorded_ = false;
};

// The backend's thread count for one op, on the calling thread. OpenBLAS built for OpenMP takes
// its thread count from omp_get_max_threads() at each call, so this covers sgemm too. OpenMP's
// nthreads setting is per thread: other threads are unaffected.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : saved_(omp_get_max_threads()) {
    if (saved_ != threads) omp_set_num_threads(threads);
    restore_ = saved_ != threads;
  }
  ~ThreadScope() {
    if (restore_) omp_set_num_threads(saved_);
  }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
  bool restore_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, DType compute, CpuBf16Gemm bf16_gemm)
      : threads_(threads > 0 ? threads : default_threads()), bf16_(compute == DType::BF16) {
    if (compute != DType::F32 && compute != DType::BF16)
      throw std::invalid_argument(std::string("cpu backend: compute precision ") + dtype_name(compute) +
                                  ": expected f32 or bf16");
    enable_flush_denormals_on_this_thread();
#pragma omp parallel num_threads(threads_)
    enable_flush_denormals_on_this_thread();
    if (bf16_) {
      const cpu::Bf16GemmChoice choice = cpu::choose_bf16_gemm(bf16_gemm);
      bf16_gemm_ = choice.why;
      if (choice.onednn) onednn_ = std::make_unique<cpu::OnednnBf16Gemm>();
    }
  }

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override {
    return "cpu (" + std::to_string(threads_) + " threads" + (bf16_ ? ", bf16 compute: " + bf16_gemm_ : "") + ")";
  }
  int threads() const override { return threads_; }

  std::unique_ptr<Arena> create_arena(std::string name, std::size_t bytes, MemoryKind) override {
    // Device and pinned memory are host memory here.
    return std::make_unique<Arena>(std::move(name), bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes, Stream&) override {
    if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
  }
  void memset_zero(void* dst, std::size_t bytes, Stream&) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
  std::unique_ptr<Stream> create_stream(StreamPriority p) override {
    return std::make_unique<CpuStream>(p);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }

  bool supports(OpKind op, DType dtype) const override {
    return op != OpKind::Count &&
           (dtype == DType::F32 || (dtype == DType::BF16 && has_bf16_buffer(op, compute_precision())));
  }
  DType compute_precision() const override { return bf16_ ? DType::BF16 : DType::F32; }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                          int B, int T, int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void embedding_lookup_local(float* out, const std::int32_t* tokens, const float* wte, int N,
                              int C, int v0, int vcount, Stream&) override {
    ThreadScope t(threads_);
    cpu::embedding_lookup_local(out, tokens, wte, N, C, v0, vcount);
  }
  void add_positions(float* out, const float* wpe, int B, int T, int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::add_positions(out, wpe, B, T, C);
  }
  void embedding_backward_local(float* dwte, float* dwpe, const float* dout,
                                const std::int32_t* tokens, int B, int T, int C, int v0,
                                int vcount, Stream&) override {
    ThreadScope t(threads_);
    cpu::embedding_backward_local(dwte, dwpe, dout, tokens, B, T, C, v0, vcount);
  }

  void layernorm_forward(ActivationOut out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          ActivationIn inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void layernorm_backward_input(float* dinp, const float* dout, ActivationIn inp,
                                const float* weight, const float* mean, const float* rstd, int N,
                                int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C);
  }
  void layernorm_backward_params(float* dweight, float* dbias, const float* dout,
                                 ActivationIn inp, const float* mean, const float* rstd, int N,
                                 int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C);
  }

  void matmul_forward(float* out, ActivationIn inp, GemmWeight weight, const float* bias, int N,
                      int C, int OC, Stream&) override {
    ThreadScope t(threads_);
    if (onednn_) cpu::onednn::matmul_forward(*onednn_, out, inp, weight, bias, N, C, OC);
    else if (bf16_) cpu::bf16::matmul_forward(out, inp, weight, bias, N, C, OC);
    else
      cpu::matmul_forward(out, fp32_input(inp, "matmul_forward"), fp32_weight(weight, "matmul_forward"), bias, N, C,
                          OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       ActivationIn inp, GemmWeight weight, int N, int C, int OC,
                       Stream&) override {
    ThreadScope t(threads_);
    if (onednn_) cpu::onednn::matmul_backward(*onednn_, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    else if (bf16_) cpu::bf16::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    else cpu::matmul_backward(dinp, dweight, dbias, dout, fp32_input(inp, "matmul_backward"),
                              fp32_weight(weight, "matmul_backward"), N, C, OC);
  }
  void matmul_backward_input(float* dinp, const float* dout, GemmWeight weight, int N, int C,
                             int OC, Stream&) override {
    ThreadScope t(threads_);
    if (onednn_) cpu::onednn::matmul_backward_input(*onednn_, dinp, dout, weight, N, C, OC);
    else if (bf16_) cpu::bf16::matmul_backward_input(dinp, dout, weight, N, C, OC);
    else cpu::matmul_backward_input(dinp, dout, fp32_weight(weight, "matmul_backward_input"), N, C, OC);
  }

  void attention_forward(ActivationOut out, ActivationOut att, ActivationIn qkv, int B, int T, int C, int NH,
                         Stream&) override {
    ThreadScope t(threads_);
    if (bf16_) cpu::bf16::attention_forward(out, att, qkv, B, T, C, NH);
    else cpu::attention_forward(out, att, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, ActivationIn qkv, ActivationIn /*out: unread*/,
                          ActivationIn att, int B, int T, int C, int NH, Stream&) override {
    ThreadScope t(threads_);
    if (bf16_) cpu::bf16::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    else cpu::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  }
  void attention_forward_kv(float* out, float* scores, const float* qkv, float* k_cache,
                            float* v_cache, int past, int n, int C, int NH, Stream&) override {
    ThreadScope t(threads_);
    cpu::attention_forward_kv(out, scores, qkv, k_cache, v_cache, past, n, C, NH);
  }

  void gelu_forward(ActivationOut out, const float* inp, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, ActivationIn inp, const float* dout, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void add(float* out, const float* a, const float* b, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::add_forward(out, a, b, n);
  }
  void add_inplace(float* acc, const float* x, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::add_inplace(acc, x, n);
  }
  void add_bias(float* out, const float* bias, int N, int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::add_bias(out, bias, N, C);
  }
  void scale(float* x, float factor, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::scale_inplace(x, factor, n);
  }
  void cast_to_bf16(std::uint16_t* out, const float* in, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::cast_to_bf16(out, in, n);
  }
  void cast_from_bf16(float* out, const std::uint16_t* in, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::cast_from_bf16(out, in, n);
  }
  void round_to_bf16(float* x, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::round_to_bf16_inplace(x, n);
  }
  double sum_squares(const float* x, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    return cpu::sum_squares(x, n);
  }

  void lm_head_logits(float* logits, const float* x, GemmWeight wte, int N, int C, int Vp,
                      Stream&) override {
    ThreadScope t(threads_);
    if (onednn_) cpu::onednn::lm_head_logits(*onednn_, logits, x, wte, N, C, Vp);
    else if (bf16_) cpu::bf16::lm_head_logits(logits, x, wte, N, C, Vp);
    else cpu::lm_head_logits(logits, x, fp32_weight(wte, "lm_head_logits"), N, C, Vp);
  }
  std::size_t lm_head_scratch_floats(int N, int Vp) const override {
    return static_cast<std::size_t>(cpu::lm_head_chunk_rows(N, Vp)) * Vp;
  }
  double lm_head_cross_entropy(float* losses, float* dx, float* dwte, const float* x,
                               GemmWeight wte, const std::int32_t* targets, int N, int C, int V,
                               int Vp, float grad_scale, float* scratch, Stream&) override {
    ThreadScope t(threads_);
    if (onednn_)
      return cpu::onednn::lm_head_cross_entropy(*onednn_, losses, dx, dwte, x, wte, targets, N, C, V, Vp,
                                                grad_scale, scratch);
    if (bf16_)
      return cpu::bf16::lm_head_cross_entropy(losses, dx, dwte, x, wte, targets, N, C, V, Vp,
                                              grad_scale, scratch);
    return cpu::lm_head_cross_entropy(losses, dx, dwte, x, fp32_weight(wte, "lm_head_cross_entropy"), targets, N,
                                      C, V, Vp, grad_scale, scratch);
  }
  std::size_t lm_head_vocab_parallel_scratch_floats(int N, int vocab_count) const override {
    return cpu::lm_head_vocab_parallel_scratch_floats(N, vocab_count);
  }
  double lm_head_cross_entropy_vocab_parallel(float* losses, float* dx, float* dwte,
                                              const float* x, GemmWeight wte,
                                              const std::int32_t* targets, int N, int C, int V,
                                              int vocab_begin, int vocab_count, float grad_scale,
                                              float* scratch, const GroupReduce& reduce,
                                              Stream&) override {
    ThreadScope t(threads_);
    if (onednn_)
      return cpu::onednn::lm_head_cross_entropy_vocab_parallel(*onednn_, losses, dx, dwte, x, wte, targets, N, C,
                                                               V, vocab_begin, vocab_count, grad_scale, scratch,
                                                               reduce);
    if (bf16_)
      return cpu::bf16::lm_head_cross_entropy_vocab_parallel(losses, dx, dwte, x, wte, targets, N,
                                                             C, V, vocab_begin, vocab_count,
                                                             grad_scale, scratch, reduce);
    return cpu::lm_head_cross_entropy_vocab_parallel(losses, dx, dwte, x,
                                                     fp32_weight(wte, "lm_head_cross_entropy_vocab_parallel"),
                                                     targets, N, C, V, vocab_begin, vocab_count, grad_scale,
                                                     scratch, reduce);
  }

  void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                    const AdamWParams& h, float grad_scale, Stream&) override {
    ThreadScope t(threads_);
    cpu::adamw_update(param, grad, m, v, n, h, grad_scale);
  }

  void pagerank_step(const PagerankStep& step, Stream&) override {
    ThreadScope t(threads_);
    cpu::pagerank_step(step);
  }
  void bfs_step(const BfsStep& step, Stream&) override {
    ThreadScope t(threads_);
    cpu::bfs_step(step);
  }
  void graphsgd_step(const GraphSgdStep& step, Stream&) override { cpu::graphsgd_step(step); }  // serial

  double measure_matmul_gflops(int n, int reps) override {
    ThreadScope t(threads_);
    return cpu::measure_sgemm_gflops(n, reps);
  }

  // ---- The Llama family ----
  void rmsnorm_forward(ActivationOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                       Stream&) override {
    ThreadScope t(threads_);
    cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward_input(float* dinp, const float* dout, ActivationIn inp, const float* weight,
                              const float* rstd, int N, int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::rmsnorm_backward_input(dinp, dout, inp, weight, rstd, N, C);
  }
  void rmsnorm_backward_params(float* dweight, const float* dout, ActivationIn inp, const float* rstd, int N,
                               int C, Stream&) override {
    ThreadScope t(threads_);
    cpu::rmsnorm_backward_params(dweight, dout, inp, rstd, N, C);
  }
  void rope_forward(float* x, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                    Stream&) override {
    ThreadScope t(threads_);
    cpu::rope_forward(x, table, B, T, pos0, heads, hs, ld);
  }
  void rope_backward(float* dx, const float* table, int B, int T, int pos0, int heads, int hs, int ld,
                     Stream&) override {
    ThreadScope t(threads_);
    cpu::rope_backward(dx, table, B, T, pos0, heads, hs, ld);
  }
  void swiglu_forward(ActivationOut out, const float* gate, const float* up, std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, ActivationIn gate, ActivationIn up,
                       std::size_t n, Stream&) override {
    ThreadScope t(threads_);
    cpu::swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  void attention_forward_gqa(ActivationOut out, ActivationOut att, ActivationIn q, ActivationIn k, ActivationIn v,
                             int B, int T, int NH, int KVH, int hs, Stream&) override {
    ThreadScope t(threads_);
    if (bf16_) cpu::bf16::attention_forward_gqa(out, att, q, k, v, B, T, NH, KVH, hs);
    else cpu::attention_forward_gqa(out, att, q, k, v, B, T, NH, KVH, hs);
  }
  void attention_backward_gqa(float* dq, float* dk, float* dv, const float* dout, ActivationIn q, ActivationIn k,
                              ActivationIn v, ActivationIn /*out: unread*/, ActivationIn att, int B, int T, int NH,
                              int KVH, int hs, Stream&) override {
    ThreadScope t(threads_);
    if (bf16_) cpu::bf16::attention_backward_gqa(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, hs);
    else cpu::attention_backward_gqa(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, hs);
  }
  void attention_forward_kv_gqa(float* out, float* scores, const float* q, const float* k, const float* v,
                                float* k_cache, float* v_cache, int past, int n, int NH, int KVH, int hs,
                                Stream&) override {
    ThreadScope t(threads_);
    cpu::attention_forward_kv_gqa(out, scores, q, k, v, k_cache, v_cache, past, n, NH, KVH, hs);
  }
  void embedding_backward_tokens(float* dwte, const float* dout, const std::int32_t* tokens, int N, int C, int v0,
                                 int vcount, Stream&) override {
    ThreadScope t(threads_);
    cpu::embedding_backward_tokens(dwte, dout, tokens, N, C, v0, vcount);
  }

  // The CNN lanes' ops (cpu_ops_cnn.h): one thread, the loops the lanes ran before.
  void cnn_im2col(float* cols, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                  Stream&) override {
    cpu::cnn_im2col(cols, in, g, r0, r1);
  }
  void cnn_col2im(float* din, const float* dcols, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                  Stream&) override {
    cpu::cnn_col2im(din, dcols, g, r0, r1);
  }
  void batch_norm_forward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, Stream&) override {
    cpu::batch_norm_forward(phase, t, r0, r1);
  }
  void batch_norm_backward(int phase, const BatchNormTensors& t, std::int64_t r0, std::int64_t r1, Stream&) override {
    cpu::batch_norm_backward(phase, t, r0, r1);
  }
  void batch_norm_update_statistics(float* running_mean, float* running_var, const float* mean,
                                    const float* var_unbiased, int C, float momentum, Stream&) override {
    cpu::batch_norm_update_statistics(running_mean, running_var, mean, var_unbiased, C, momentum);
  }
  void max_pool_forward(float* out, std::int64_t* argmax, const float* in, const CnnWindow& g, std::int64_t r0,
                        std::int64_t r1, Stream&) override {
    cpu::max_pool_forward(out, argmax, in, g, r0, r1);
  }
  void max_pool_backward(float* din, const float* dout, const std::int64_t* argmax, const CnnWindow& g,
                         std::int64_t r0, std::int64_t r1, Stream&) override {
    cpu::max_pool_backward(din, dout, argmax, g, r0, r1);
  }
  void adaptive_avg_pool_forward(float* out, const float* in, const CnnWindow& g, std::int64_t r0, std::int64_t r1,
                                 Stream&) override {
    cpu::adaptive_avg_pool_forward(out, in, g, r0, r1);
  }
  void adaptive_avg_pool_backward(float* din, const float* dout, const CnnWindow& g, std::int64_t r0,
                                  std::int64_t r1, Stream&) override {
    cpu::adaptive_avg_pool_backward(din, dout, g, r0, r1);
  }
  void relu_forward(float* x, std::size_t n, Stream&) override { cpu::relu_forward(x, n); }
  void relu_backward(float* dx, const float* y, std::size_t n, Stream&) override { cpu::relu_backward(dx, y, n); }
  void dropout(float* x, std::size_t n, std::uint64_t stream, std::uint64_t first, float p, Stream&) override {
    cpu::dropout(x, n, stream, first, p);
  }
  double classifier_cross_entropy(float* dlogits, const float* logits, const std::int32_t* labels, int n, int classes,
                                  Stream&) override {
    return cpu::classifier_cross_entropy(dlogits, logits, labels, n, classes);
  }
  void sgd_momentum_update(float* param, float* grad, float* momentum, std::size_t n, const SgdMomentumParams& h,
                           Stream&) override {
    cpu::sgd_momentum_update(param, grad, momentum, n, h);
  }

 private:
  static int default_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n ? static_cast<int>(n) : 1;
  }
  int threads_;
  bool bf16_;  // bf16 compute: the matmul family through cpu::onednn or cpu::bf16 (cpu_ops.h)
  std::string bf16_gemm_;  // which of the two, in words
  std::unique_ptr<cpu::OnednnBf16Gemm> onednn_;  // set when bf16 GEMMs run on oneDNN
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads, DType compute, CpuBf16Gemm bf16_gemm) {
  return std::make_unique<CpuBackend>(threads, compute, bf16_gemm);
}

std::string describe_cpu_bf16_gemm(CpuBf16Gemm requested) { return cpu::choose_bf16_gemm(requested).why; }

}  // namespace pipelane
