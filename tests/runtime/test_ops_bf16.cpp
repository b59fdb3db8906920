// The CPU backend in bf16 compute mode (runtime/backend.h), on both of its GEMM paths (emulated:
// rounded fp32 copies through sgemm; oneDNN's bf16 GEMMs): the matmul family against the double
// reference of bf16 compute with derived bounds (bf16_reference.h), against the fp32 ops within
// llm.c's bf16 tolerance, and really different from them; fp32 stays the default. A bf16 copy of
// the weights (bf16 storage's) gives the GEMMs' bits of the rounded fp32 weights.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/backend_registry.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/onednn_bf16_gemm.h"
#include "tests/runtime/bf16_buffer_bits.h"
#include "tests/runtime/bf16_reference.h"

namespace pipelane::bf16_test {
namespace {

const char* path_name(CpuBf16Gemm path) { return path == CpuBf16Gemm::Onednn ? "onednn" : "emulated"; }

// The oneDNN cases need a bf16 matmul from oneDNN. On AVX-512 CPUs without bf16 instructions
// oneDNN has one (it converts to fp32), so these run there too; oneDNN 2.6 has none below AVX-512.
#define SKIP_WITHOUT_ONEDNN_BF16(path)                                                             \
  do {                                                                                             \
    if ((path) == CpuBf16Gemm::Onednn) {                                                           \
      const cpu::OnednnBf16Support support = cpu::probe_onednn_bf16();                             \
      if (!support.matmul) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (" << support.isa << ")"; \
    }                                                                                              \
  } while (0)

class Bf16ComputeCpu : public ::testing::TestWithParam<CpuBf16Gemm> {};

TEST_P(Bf16ComputeCpu, MatmulAttentionAndHeadMatchTheBf16Reference) {
  SKIP_WITHOUT_ONEDNN_BF16(GetParam());
  const Inputs in = make_inputs();
  const auto cpu = make_cpu_backend(1, DType::BF16, GetParam());
  ASSERT_EQ(cpu->compute_precision(), DType::BF16);
  const Outputs got = run_ops(*cpu, in);
  const Reference want = reference(in, got);
  for (const auto& [name, t] : got.t) expect_within(t, want.t.at(name), name);
  EXPECT_NEAR(got.head_sum, want.head_sum.value[0], want.head_sum.bound[0]);
  EXPECT_NEAR(got.head_vp_sum, want.head_sum.value[0], want.head_sum.bound[0]);
  // matmul_backward_input is matmul_backward's input half, bit for bit.
  EXPECT_EQ(got.t.at("matmul.dinp"), got.t.at("matmul.dinp_only"));
}

// The bf16 copy of the weights (GemmWeight::of_bf16, [train] gemm_weights = bf16): the GEMMs read
// it in place of rounding the fp32 weight, on both paths, and give the same bits.
TEST_P(Bf16ComputeCpu, Bf16WeightsGiveTheBitsOfRoundedFp32Weights) {
  SKIP_WITHOUT_ONEDNN_BF16(GetParam());
  const auto cpu = make_cpu_backend(1, DType::BF16, GetParam());
  expect_bf16_weights_change_no_bit(*cpu, make_inputs());
}

// bf16 storage's probabilities written and read by the attention ops themselves, its norm outputs
// written by the norms, its residual stream read by the norms' backward, its MLP activation written
// by GeLU and SwiGLU: the bits of the fp32 buffer's ops around the casts, MHA and GQA (MQA too), in
// either compute precision.
TEST(Bf16ComputeCpuChoice, Bf16ProbabilitiesAndNormOutputsGiveTheBitsOfTheFp32OpsAroundTheCasts) {
  for (const DType compute : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(compute));
    const auto cpu = make_cpu_backend(2, compute);
    for (const int kv_heads : {0, 2, 1}) bf16_buffers_test::expect_bf16_probabilities_change_no_bit(*cpu, kv_heads);
    bf16_buffers_test::expect_bf16_norm_outputs_change_no_bit(*cpu);
    bf16_buffers_test::expect_bf16_norm_inputs_change_no_bit(*cpu);
    bf16_buffers_test::expect_bf16_activations_change_no_bit(*cpu);
    bf16_buffers_test::expect_bf16_activation_inputs_change_no_bit(*cpu);
    for (const int kv_heads : {0, 2, 1}) bf16_buffers_test::expect_bf16_attention_inputs_change_no_bit(*cpu, kv_heads);
  }
}

// bf16 storage's norm outputs read by the GEMMs as they are: the bits of the rounded fp32 input,
// on both GEMM paths.
TEST_P(Bf16ComputeCpu, Bf16InputsGiveTheBitsOfRoundedFp32Inputs) {
  SKIP_WITHOUT_ONEDNN_BF16(GetParam());
  const auto cpu = make_cpu_backend(2, DType::BF16, GetParam());
  bf16_buffers_test::expect_bf16_gemm_inputs_change_no_bit(*cpu);
}

TEST(Bf16ComputeCpuChoice, Fp32ComputeRefusesBf16Weights) {
  expect_fp32_compute_refuses_bf16_weights(*make_cpu_backend(1));
}

TEST_P(Bf16ComputeCpu, WithinLlmcToleranceOfFp32AndNotEqualToIt) {
  SKIP_WITHOUT_ONEDNN_BF16(GetParam());
  const Inputs in = make_inputs();
  const auto bf16 = make_cpu_backend(1, DType::BF16, GetParam()), fp32 = make_cpu_backend(1);
  const Outputs a = run_ops(*bf16, in), b = run_ops(*fp32, in);
  const Reference want = reference(in, a);
  for (const auto& [name, t] : a.t) {
    expect_llmc_close(t, b.t.at(name), want.t.at(name), gemm_levels(name), name);
    if (name != "matmul.dbias") {  // a column sum of fp32 dout in both modes: equal
      EXPECT_NE(t, b.t.at(name)) << name << ": bf16 compute changed nothing";
    }
  }
  EXPECT_EQ(a.t.at("matmul.dbias"), b.t.at("matmul.dbias"));
}

// The oneDNN GEMMs on shapes that fit no kernel's blocking (odd rows, columns and depths, a long
// accumulation), on two threads, against the double reference.
//
// The bound, per output element: (K + 2) u S (bf16_reference.h's gemm_sums), K the accumulation
// length, S the sum of the terms' magnitudes, u = 2^-24. Why it holds for oneDNN whatever its
// blocking: the operands are bf16 (8 significant bits), so every product is exact in fp32 (16
// bits), also where oneDNN widens bf16 to fp32 and uses FMA (CPUs without bf16 instructions).
// What remains is the sum: VDPBF16PS (AVX512-BF16) and TDPBF16PS (AMX) add the two products of
// a pair into the fp32 accumulator with round-to-nearest, and oneDNN combines K-blocks (and
// threads' partial sums) by fp32 additions, so every element is a tree of at most K - 1 fp32
// additions of exact products, plus one for the `+=` of a sum post-op (bias, dweight). Each
// rounded addition adds at most u x |its result| <= u S, so the error is at most K u S (first
// order; the second-order term K^2 u^2 S is far below the 2 u S slack for K < 2^20). The bf16
// instructions flush denormal results to zero: at most 2^-126 per addition, inside the 1e-30
// absolute slack of expect_within.
TEST(Bf16ComputeCpuOnednn, OddShapesMatchTheDoubleReference) {
  SKIP_WITHOUT_ONEDNN_BF16(CpuBf16Gemm::Onednn);
  Sizes odd;
  odd.N = 37, odd.C = 1031, odd.OC = 67;     // a long accumulation (C) for the forward
  odd.HN = 45, odd.HC = 77, odd.V = 301, odd.Vp = 333;
  Sizes tall;
  tall.N = 515, tall.C = 3, tall.OC = 1;     // dweight accumulates over 515 rows; K = 3, OC = 1
  tall.HN = 1, tall.HC = 1, tall.V = 5, tall.Vp = 7;
  for (const Sizes& s : {odd, tall}) {
    SCOPED_TRACE("N " + std::to_string(s.N) + ", C " + std::to_string(s.C) + ", OC " + std::to_string(s.OC));
    const Inputs in = make_inputs(23, s);
    const auto cpu = make_cpu_backend(2, DType::BF16, CpuBf16Gemm::Onednn);
    const Outputs got = run_ops(*cpu, in);
    const Reference want = reference(in, got);
    for (const char* name : {"matmul.out", "matmul.dinp", "matmul.dinp_only", "matmul.dweight", "matmul.dbias",
                             "head.logits", "head.losses", "head.dx", "head.dwte", "head_vp.losses", "head_vp.dx",
                             "head_vp.dwte"})
      expect_within(got.t.at(name), want.t.at(name), name);
    EXPECT_EQ(got.t.at("matmul.dinp"), got.t.at("matmul.dinp_only"));
    // Run to run, the same primitives give the same bits (training reruns rely on it).
    const Outputs again = run_ops(*cpu, in);
    for (const auto& [name, t] : got.t) EXPECT_EQ(t, again.t.at(name)) << name << " changed between two runs";
  }
}

TEST(Bf16ComputeCpuOnednn, EmulatedAndOnednnAgreeWithinBothBounds) {
  SKIP_WITHOUT_ONEDNN_BF16(CpuBf16Gemm::Onednn);
  const Inputs in = make_inputs();
  const auto emulated = make_cpu_backend(1, DType::BF16, CpuBf16Gemm::Emulated);
  const auto onednn = make_cpu_backend(1, DType::BF16, CpuBf16Gemm::Onednn);
  const Outputs a = run_ops(*emulated, in), b = run_ops(*onednn, in);
  const Reference want = reference(in, a);
  for (const char* name : {"matmul.out", "matmul.dinp", "matmul.dweight", "head.logits"})
    expect_close_to(a.t.at(name), b.t.at(name), want.t.at(name), name);
}

INSTANTIATE_TEST_SUITE_P(GemmPaths, Bf16ComputeCpu, ::testing::Values(CpuBf16Gemm::Emulated, CpuBf16Gemm::Onednn),
                         [](const ::testing::TestParamInfo<CpuBf16Gemm>& p) { return path_name(p.param); });

TEST(Bf16ComputeCpuBounds, TheBoundsAreTightEnoughToSeeFp32) {
  // The fp32 ops fall outside the bf16 reference's bounds: the bounds would notice operands that
  // were not rounded.
  const Inputs in = make_inputs();
  const auto fp32 = make_cpu_backend(1);
  const Outputs got = run_ops(*fp32, in);
  const Reference want = reference(in, got);
  for (const char* name : {"matmul.out", "matmul.dinp", "matmul.dweight", "attention.out", "attention.dqkv",
                           "head.logits", "head.dx", "head.dwte"}) {
    int outside = 0;
    const std::vector<float>& t = got.t.at(name);
    for (std::size_t i = 0; i < t.size(); ++i)
      outside += std::fabs(t[i] - want.t.at(name).value[i]) > want.t.at(name).bound[i];
    EXPECT_GT(outside, 0) << name;
  }
}

TEST(Bf16ComputeCpuChoice, Fp32IsTheDefaultAndTheRegistryPassesThePrecision) {
  EXPECT_EQ(make_cpu_backend(1)->compute_precision(), DType::F32);
  EXPECT_THROW(make_cpu_backend(1, DType::U16), std::invalid_argument);
  BackendOptions o;
  o.threads = 1;
  o.compute = DType::BF16;
  const auto made = BackendRegistry::with_builtins().create("cpu", o);
  EXPECT_EQ(made->compute_precision(), DType::BF16);
  EXPECT_NE(made->name().find("bf16 compute"), std::string::npos) << made->name();
  EXPECT_EQ(make_cpu_backend(1)->name().find("bf16"), std::string::npos) << "an fp32 backend names no bf16 path";
}

// Restores $PIPELANE_CPU_BF16_GEMM as it was (ctest may run this binary with it set).
class Bf16GemmVariable {
 public:
  Bf16GemmVariable() {
    if (const char* v = std::getenv(kName)) saved_ = v, had_ = true;
  }
  ~Bf16GemmVariable() {
    if (had_) setenv(kName, saved_.c_str(), 1);
    else unsetenv(kName);
  }
  void set(const char* value) { setenv(kName, value, 1); }

 private:
  static constexpr const char* kName = "PIPELANE_CPU_BF16_GEMM";
  std::string saved_;
  bool had_ = false;
};

TEST(Bf16ComputeCpuChoice, ThePathIsChosenOnceNamedAndForcedByTheVariable) {
  const bool onednn = cpu::probe_onednn_bf16().matmul;
  Bf16GemmVariable variable;
  variable.set("emulated");
  EXPECT_NE(make_cpu_backend(1, DType::BF16)->name().find("emulated GEMMs"), std::string::npos);
  // An explicit request wins over the variable.
  if (onednn) {
    EXPECT_NE(make_cpu_backend(1, DType::BF16, CpuBf16Gemm::Onednn)->name().find("oneDNN bf16 GEMMs"),
              std::string::npos);
  }
  variable.set("onednn");
  if (onednn) {
    const auto forced = make_cpu_backend(1, DType::BF16);
    EXPECT_NE(forced->name().find("oneDNN bf16 GEMMs"), std::string::npos) << forced->name();
    EXPECT_NE(forced->name().find("PIPELANE_CPU_BF16_GEMM=onednn"), std::string::npos) << forced->name();
  } else {
    EXPECT_THROW(make_cpu_backend(1, DType::BF16), std::runtime_error);
  }
  EXPECT_NE(make_cpu_backend(1, DType::BF16, CpuBf16Gemm::Emulated)->name().find("emulated GEMMs"),
            std::string::npos);
  variable.set("fast");
  EXPECT_THROW(make_cpu_backend(1, DType::BF16), std::invalid_argument);
  EXPECT_NO_THROW(make_cpu_backend(1, DType::F32)) << "fp32 backends do not read the variable";
  // Auto takes oneDNN exactly when the CPU has bf16 dot products.
  variable.set("auto");
  const cpu::OnednnBf16Support s = cpu::probe_onednn_bf16();
  const std::string name = make_cpu_backend(1, DType::BF16)->name();
  EXPECT_EQ(name.find("oneDNN bf16 GEMMs") != std::string::npos, s.native && s.matmul) << name;
  EXPECT_NE(name.find(s.isa), std::string::npos) << name;
}

}  // namespace
}  // namespace pipelane::bf16_test
