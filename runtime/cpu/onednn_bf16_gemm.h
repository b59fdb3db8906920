// The CPU backend's real bf16 GEMM: oneDNN matmuls on bf16 operands with fp32 accumulation and
// fp32 outputs, which run on the CPU's bf16 dot-product instructions (AVX512-BF16: AMD Zen 4,
// Intel Cooper Lake and later; AMX-BF16: Sapphire Rapids and later). A CpuBackend in bf16
// compute mode owns one when it chose this path (cpu_backend.h says how it chooses); oneDNN's
// headers stay inside the .cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pipelane::cpu {

// What oneDNN can do with bf16 on this CPU, asked once per backend.
struct OnednnBf16Support {
  bool matmul = false;  // a bf16 matmul primitive can be created (on AVX-512 without bf16
                        // instructions oneDNN converts to fp32: correct, not fast)
  bool native = false;  // the effective ISA has bf16 dot products (avx512_core_bf16 or AMX)
  std::string isa;      // oneDNN's effective ISA, e.g. "avx512_core_bf16"
};
OnednnBf16Support probe_onednn_bf16();

// dst[i] = src[i] rounded to the nearest bf16 (ties to even; bf16_round.h), as bf16 bits. The
// same rounding as the emulated path, so both GEMM paths read the same operand values.
void to_bf16_bits(std::uint16_t* dst, const float* src, std::size_t n);

class OnednnBf16Gemm {
 public:
  OnednnBf16Gemm();
  ~OnednnBf16Gemm();
  OnednnBf16Gemm(const OnednnBf16Gemm&) = delete;
  OnednnBf16Gemm& operator=(const OnednnBf16Gemm&) = delete;

  // C[M,N] (= or += when `accumulate`) op(A)[M,K] @ op(B)[K,N], row-major with leading dimensions
  // as cblas_sgemm's; A and B are bf16 bits (staging()). Runs on the calling thread's OpenMP
  // threads (omp_get_max_threads()), as the backend's other kernels do. The primitive for each
  // shape is made once and kept.
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, const std::uint16_t* A, int lda,
            const std::uint16_t* B, int ldb, bool accumulate, float* C, int ldc);

  // `src` converted to bf16 bits in staging buffer `slot` (0..kSlots-1), kept between calls so
  // that a training step does not allocate. Valid until the slot is used again.
  static constexpr int kSlots = 4;
  const std::uint16_t* staged(int slot, const float* src, std::size_t n);

  // The staging buffers are this object's: an op holds this lock for as long as it uses them,
  // so two threads that share one backend cannot interleave.
  std::mutex& op_mutex() { return op_mutex_; }

  std::size_t cached_primitives() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::uint16_t> staging_[kSlots];
  std::mutex op_mutex_;
};

}  // namespace pipelane::cpu
