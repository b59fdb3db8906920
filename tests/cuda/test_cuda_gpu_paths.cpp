// What a real GPU would trip on, checked on the emulated backend (no GPU): GEMMs whose epilogue
// cuBLASLt's heuristic finds no algorithm for run as the unfused ops; the alignment each GEMM
// tells the heuristic is the one its pointers have; the gradient norm waits for the stream once
// per call, not once per tensor, with the same bits as one sum_squares call per tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <random>
#include <vector>

#include "model/adamw.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#include "runtime/cuda/plans/gemm_plan.h"

namespace pipelane::cuda_test {
namespace {

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The outputs of a bias nn.Linear, the fused GeLU layer forward and the fused GeLU input gradient.
struct LinearOutputs {
  std::vector<float> out, pre, gelu_out, dpre;
};

LinearOutputs run_linear_ops(Backend& b, int N, int C, int OC) {
  std::mt19937 rng(11);
  const auto inp = random_floats(rng, std::size_t(N) * C), w = random_floats(rng, std::size_t(OC) * C),
             bias = random_floats(rng, OC), dout = random_floats(rng, std::size_t(N) * OC),
             pre_in = random_floats(rng, std::size_t(N) * C);
  auto s = b.create_stream(StreamPriority::High);
  auto arena = b.create_arena("linear", 64 << 20);
  const auto up = [&](const std::vector<float>& v) {
    float* p = arena->allocate_n<float>(v.size());
    b.copy(p, v.data(), v.size() * sizeof(float), *s);
    return p;
  };
  const auto down = [&](const float* p, std::size_t n) {
    std::vector<float> v(n);
    b.copy(v.data(), p, n * sizeof(float), *s);
    s->synchronize();
    return v;
  };
  float *d_inp = up(inp), *d_w = up(w), *d_bias = up(bias), *d_dout = up(dout), *d_pre_in = up(pre_in);
  float* out = arena->allocate_n<float>(std::size_t(N) * OC);
  float* pre = arena->allocate_n<float>(std::size_t(N) * OC);
  float* gelu_out = arena->allocate_n<float>(std::size_t(N) * OC);
  float* dpre = arena->allocate_n<float>(std::size_t(N) * C);
  b.matmul_forward(out, d_inp, d_w, d_bias, N, C, OC, *s);
  b.matmul_gelu_forward(pre, gelu_out, d_inp, d_w, d_bias, N, C, OC, *s);
  b.matmul_backward_input_dgelu(dpre, d_dout, d_w, d_pre_in, N, C, OC, *s);
  return {down(out, std::size_t(N) * OC), down(pre, std::size_t(N) * OC), down(gelu_out, std::size_t(N) * OC),
          down(dpre, std::size_t(N) * C)};
}

double largest_relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / scale);
  return worst;
}

TEST(CudaGemmFallback, EpiloguesTheLibraryRefusesRunAsTheUnfusedOps) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto refusing = cuda_emu::make_emulated_cuda_backend(cuda_emu::emulated_backend_config(), {true, nullptr});
  const auto fused = cuda_emu::make_emulated_cuda_backend();
  const auto cpu = make_cpu_backend(1);
  // Widths that are multiples of 8, so the fused GeLU plans apply and the refusal is what
  // switches them off.
  const int N = 6, C = 16, OC = 24;
  const LinearOutputs got = run_linear_ops(*refusing, N, C, OC), with_epilogues = run_linear_ops(*fused, N, C, OC),
                      want = run_linear_ops(*cpu, N, C, OC);
  // The bias layer's epilogue; GELU_AUX_BIAS, whose fallback (Backend's matmul_forward + GeLU)
  // asks for the bias epilogue again, refused again; DGELU.
  EXPECT_EQ(refusing->stats().unfused_epilogues, 4u);
  EXPECT_EQ(fused->stats().unfused_epilogues, 0u);
  // Against the CPU's ops: C = 16 products and one bias sum, GeLU in fp32: a few float roundings
  // of values of order 1, so 1e-5 of the largest output holds with a wide margin (u = 6e-8).
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>> outputs[] = {
      {"out", {&got.out, &want.out}}, {"pre", {&got.pre, &want.pre}},
      {"gelu_out", {&got.gelu_out, &want.gelu_out}}, {"dpre", {&got.dpre, &want.dpre}}};
  for (const auto& [name, pair] : outputs) EXPECT_LE(largest_relative_difference(*pair.first, *pair.second), 1e-5) << name;
  EXPECT_LE(largest_relative_difference(with_epilogues.gelu_out, want.gelu_out), 1e-5);
}

TEST(CudaGemmAlignment, PointerAlignmentIsTheLargestPowerOfTwoUpTo256) {
  const auto at = [](std::uintptr_t a) { return cuda::pointer_alignment(reinterpret_cast<const void*>(a)); };
  EXPECT_EQ(at(0), 256u);  // no matrix (C when beta = 0)
  EXPECT_EQ(at(0x1000), 256u);
  EXPECT_EQ(at(0x1040), 64u);  // an arena's alignment
  EXPECT_EQ(at(0x1044), 4u);   // a float past it
  EXPECT_EQ(at(0x1042), 2u);   // a bf16 past it
  cuda::GemmCall g;
  g.a.ptr = reinterpret_cast<const void*>(0x2000);
  g.b.ptr = reinterpret_cast<const void*>(0x2008);
  g.d = reinterpret_cast<void*>(0x2010);
  const cuda::GemmAlignments al = cuda::gemm_alignments(g);
  EXPECT_EQ(al.a, 256u);
  EXPECT_EQ(al.b, 8u);
  EXPECT_EQ(al.c, 16u) << "C's layout is D's when C is not given";
  EXPECT_EQ(al.d, 16u);
}

// The attention in bf16 compute reads k and v at q16 + n and q16 + 2n (bf16: 2n bytes past an
// aligned base): what the heuristic is told must be what those pointers have, never 256.
TEST(CudaGemmAlignment, TheBackendsGemmsReportTheirPointersAlignment) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  std::mutex mu;
  std::vector<std::pair<const void*, std::uint32_t>> seen;
  cuda_emu::InterpretedGemmOptions options;
  options.observe = [&](const cuda::GemmCall& g) {
    const cuda::GemmAlignments al = cuda::gemm_alignments(g);
    const std::lock_guard lock(mu);
    seen.push_back({g.a.ptr, al.a});
    seen.push_back({g.b.ptr, al.b});
    seen.push_back({g.d, al.d});
  };
  cuda::CudaBackendConfig config = cuda_emu::emulated_backend_config();
  config.compute = DType::BF16;
  const auto b = cuda_emu::make_emulated_cuda_backend(config, options);
  const int B = 1, T = 3, C = 6, NH = 2;  // n = B*T*C = 18 bf16 values: k16 is 36 bytes past q16
  auto s = b->create_stream(StreamPriority::High);
  auto arena = b->create_arena("attention", 1 << 20);
  std::mt19937 rng(5);
  const auto qkv = random_floats(rng, 3 * std::size_t(B) * T * C);
  float* d_qkv = arena->allocate_n<float>(qkv.size());
  b->copy(d_qkv, qkv.data(), qkv.size() * sizeof(float), *s);
  float* out = arena->allocate_n<float>(std::size_t(B) * T * C);
  float* att = arena->allocate_n<float>(b->attention_saved_floats(B, T, C, NH));
  b->attention_forward(out, att, d_qkv, B, T, C, NH, *s);
  s->synchronize();
  ASSERT_FALSE(seen.empty());
  std::uint32_t least = 256;
  for (const auto& [p, al] : seen) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    EXPECT_EQ(address % al, 0u) << "told " << al << " for " << p;
    if (al < 256) {
      EXPECT_NE(address % (2 * al), 0u) << "told " << al << ", but " << p << " has more";
    }
    least = std::min(least, al);
  }
  EXPECT_LE(least, 4u) << "k16 = q16 + 18 bf16 values is 4-byte aligned";
}

TEST(CudaGradientNorm, OneHostWaitPerCallWithTheSameBitsAsOneCallPerTensor) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto b = cuda_emu::make_emulated_cuda_backend();
  GptConfig c;
  c.layers = 1;  // every launch is emulated: one layer's tensors keep the test short
  c.d_model = 16;
  c.heads = 2;
  c.max_seq_len = 8;
  c.vocab_size = 37;
  const ParamLayout layout(c, StageRange::whole(c));
  std::mt19937 rng(3);
  const auto grads = random_floats(rng, layout.total_floats());
  auto s = b->create_stream(StreamPriority::High);
  auto arena = b->create_arena("grads", layout.total_floats() * sizeof(float) + (1 << 16));
  float* d = arena->allocate_n<float>(grads.size());
  b->copy(d, grads.data(), grads.size() * sizeof(float), *s);
  s->synchronize();
  // The old way: one sum_squares (one wait) per entry, added in the layout's order.
  double per_tensor = 0.0;
  for (const ParamEntry& e : layout.entries()) per_tensor += b->sum_squares(d + e.offset, e.numel, *s);
  const std::uint64_t before = cuda_emu::stream_synchronizations();
  const double batched = grad_sum_squares(layout, d, *b, *s);
  const std::uint64_t waits = cuda_emu::stream_synchronizations() - before;
  EXPECT_EQ(batched, per_tensor) << "bit for bit";
  EXPECT_EQ(waits, 1u) << layout.entries().size() << " tensors";
  EXPECT_GE(layout.entries().size(), 12u);
  // And the CPU backend's default sum_squares_each gives its own per-tensor sum, bit for bit.
  const auto cpu = make_cpu_backend(1);
  auto cs = cpu->create_stream(StreamPriority::High);
  double cpu_per_tensor = 0.0;
  for (const ParamEntry& e : layout.entries()) cpu_per_tensor += cpu->sum_squares(grads.data() + e.offset, e.numel, *cs);
  EXPECT_EQ(grad_sum_squares(layout, grads.data(), *cpu, *cs), cpu_per_tensor);
}

}  // namespace
}  // namespace pipelane::cuda_test
