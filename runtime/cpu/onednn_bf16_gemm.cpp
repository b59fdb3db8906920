#include "runtime/cpu/onednn_bf16_gemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstring>
#include <map>
#include <tuple>

#include "runtime/cpu/bf16_round.h"

namespace pipelane::cpu {

namespace {

std::string isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "isa 0x" + std::to_string(static_cast<unsigned>(isa));
  }
}

// oneDNN's ISA values are bit sets, each containing the ISAs it extends (AMX contains
// avx512_core_bf16), so "has bf16 dot products" is "contains avx512_core_bf16's bits".
bool has_bf16_dot_products(dnnl::cpu_isa isa) {
  const auto bits = static_cast<unsigned>(isa), bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (bits & bf16) == bf16;
}

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

// Row-major op(X)[rows, cols] stored with leading dimension ld: a transposed operand is the
// same memory read with swapped strides, so no copy is made for it.
dnnl::memory::desc matrix(int rows, int cols, int ld, bool transposed, dt type) {
  return dnnl::memory::desc(dims{rows, cols}, type, transposed ? dims{1, ld} : dims{ld, 1});
}

// One shape's primitive and the descriptions of its operands.
struct Matmul {
  dnnl::memory::desc a, b, c;
  dnnl::matmul primitive;
};

Matmul make_matmul(const dnnl::engine& engine, bool trans_a, bool trans_b, int M, int N, int K, int lda, int ldb,
                   bool accumulate, int ldc) {
  Matmul m{matrix(M, K, lda, trans_a, dt::bf16), matrix(K, N, ldb, trans_b, dt::bf16),
           matrix(M, N, ldc, false, dt::f32), {}};
  const dnnl::matmul::desc desc(m.a, m.b, m.c);
  dnnl::primitive_attr attr;
  if (accumulate) {  // C += A @ B: a sum post-op reads C before the result overwrites it
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  m.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine));
  return m;
}

}  // namespace

OnednnBf16Support probe_onednn_bf16() {
  OnednnBf16Support s;
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  s.isa = isa_name(isa);
  s.native = has_bf16_dot_products(isa);
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    make_matmul(engine, false, true, 2, 2, 2, 2, 2, false, 2);
    s.matmul = true;
  } catch (const dnnl::error&) {
    s.matmul = false;  // e.g. AVX2-only CPUs: oneDNN 2.6 has no bf16 matmul there
  }
  return s;
}

void to_bf16_bits(std::uint16_t* dst, const float* src, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const float r = round_to_bf16(src[i]);
    std::uint32_t u;
    std::memcpy(&u, &r, sizeof u);
    dst[i] = static_cast<std::uint16_t>(u >> 16);
  }
}

// A training step uses a few shapes per layer kind and the head's chunks; past this many the
// shapes are changing (a decoder's growing lengths), and keeping them all would only grow.
constexpr std::size_t kMaxPrimitives = 64;

struct OnednnBf16Gemm::Impl {
  using Key = std::tuple<bool, bool, int, int, int, int, int, bool, int>;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Matmul> matmuls;
};

OnednnBf16Gemm::OnednnBf16Gemm() : impl_(std::make_unique<Impl>()) {}
OnednnBf16Gemm::~OnednnBf16Gemm() = default;

void OnednnBf16Gemm::gemm(bool trans_a, bool trans_b, int M, int N, int K, const std::uint16_t* A, int lda,
                          const std::uint16_t* B, int ldb, bool accumulate, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  const Impl::Key key{trans_a, trans_b, M, N, K, lda, ldb, accumulate, ldc};
  auto it = impl_->matmuls.find(key);
  if (it == impl_->matmuls.end() && impl_->matmuls.size() >= kMaxPrimitives)
    impl_->matmuls.clear();  // shapes that keep changing (decoding lengths): start over, stay bounded
  if (it == impl_->matmuls.end())
    it = impl_->matmuls.emplace(key, make_matmul(impl_->engine, trans_a, trans_b, M, N, K, lda, ldb, accumulate, ldc))
             .first;
  const Matmul& m = it->second;
  // oneDNN's memory objects take non-const pointers; the GEMM only reads A and B.
  const dnnl::memory a(m.a, impl_->engine, const_cast<std::uint16_t*>(A));
  const dnnl::memory b(m.b, impl_->engine, const_cast<std::uint16_t*>(B));
  const dnnl::memory c(m.c, impl_->engine, C);
  m.primitive.execute(impl_->stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  impl_->stream.wait();
}

const std::uint16_t* OnednnBf16Gemm::staged(int slot, const float* src, std::size_t n) {
  std::vector<std::uint16_t>& buffer = staging_[slot];
  if (buffer.size() < n) buffer.resize(n);
  to_bf16_bits(buffer.data(), src, n);
  return buffer.data();
}

std::size_t OnednnBf16Gemm::cached_primitives() const { return impl_->matmuls.size(); }

}  // namespace pipelane::cpu
