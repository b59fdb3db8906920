// The CPU backend in bf16 compute mode (runtime/backend.h): the matmul family against the double
// reference of bf16 compute with derived bounds (bf16_reference.h), against the fp32 ops
// within llm.c's bf16 tolerance, and really different from them; fp32 stays the default.
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/backend_registry.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/runtime/bf16_reference.h"

namespace pipelane::bf16_test {
namespace {

TEST(Bf16ComputeCpu, MatmulAttentionAndHeadMatchTheBf16Reference) {
  const Inputs in = make_inputs();
  const auto cpu = make_cpu_backend(1, DType::BF16);
  ASSERT_EQ(cpu->compute_precision(), DType::BF16);
  const Outputs got = run_ops(*cpu, in);
  const Reference want = reference(in, got);
  for (const auto& [name, t] : got.t) expect_within(t, want.t.at(name), name);
  EXPECT_NEAR(got.head_sum, want.head_sum.value[0], want.head_sum.bound[0]);
  EXPECT_NEAR(got.head_vp_sum, want.head_sum.value[0], want.head_sum.bound[0]);
  // matmul_backward_input is matmul_backward's input half, bit for bit.
  EXPECT_EQ(got.t.at("matmul.dinp"), got.t.at("matmul.dinp_only"));
}

TEST(Bf16ComputeCpu, TheBoundsAreTightEnoughToSeeFp32) {
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

TEST(Bf16ComputeCpu, WithinLlmcToleranceOfFp32AndNotEqualToIt) {
  const Inputs in = make_inputs();
  const auto bf16 = make_cpu_backend(1, DType::BF16), fp32 = make_cpu_backend(1);
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

TEST(Bf16ComputeCpu, Fp32IsTheDefaultAndTheRegistryPassesThePrecision) {
  EXPECT_EQ(make_cpu_backend(1)->compute_precision(), DType::F32);
  EXPECT_THROW(make_cpu_backend(1, DType::U16), std::invalid_argument);
  BackendOptions o;
  o.threads = 1;
  o.compute = DType::BF16;
  const auto made = BackendRegistry::with_builtins().create("cpu", o);
  EXPECT_EQ(made->compute_precision(), DType::BF16);
  EXPECT_NE(made->name().find("bf16 compute"), std::string::npos) << made->name();
}

}  // namespace
}  // namespace pipelane::bf16_test
