// Every op of every registered backend that is available here, ggml test-backend-ops style:
// against the double-precision reference (NMSE with a per-op limit; gradients against finite
// differences), against the CPU backend (NMSE; NaN/Inf in the same places, with a NaN put into
// an input), sentinel floats after every buffer intact, and two runs bit-identical. The CPU
// backend is checked against the reference here; another backend (CUDA) joins the same loop when
// `pipelane devices` lists it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <set>

#include "runtime/backend_registry.h"
#include "tests/runtime/backend_op_cases.h"
#if PIPELANE_TEST_CUDA_EMULATED
#include "runtime/cuda/emu/emulated_backend.h"
#endif

namespace pipelane {
namespace {

using backend_ops::DeviceBuffers;
using backend_ops::OpCase;
using backend_ops::Outputs;

constexpr std::size_t kArenaBytes = std::size_t{64} << 20;

struct OpRun {
  Outputs outputs;
  std::vector<std::string> damaged;
};

OpRun run_case(Backend& backend, const OpCase& c, bool poison) {
  const std::unique_ptr<Stream> stream = backend.create_stream(StreamPriority::High);
  DeviceBuffers bufs(backend, *stream, kArenaBytes);
  OpRun r;
  r.outputs = c.run(bufs, poison);
  r.damaged = bufs.damaged_guards();
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The built-in backends, plus (where the CUDA toolkit's headers are) the CUDA backend built for
// the CPU: its own source with the kernels emulated, the CUDA runtime faked and the GEMMs
// interpreted (runtime/cuda/emu/emulated_backend.h), registered for the tests only.
BackendRegistry test_registry() {
  BackendRegistry registry = BackendRegistry::with_builtins();
#if PIPELANE_TEST_CUDA_EMULATED
  registry.add(
      "cuda-emulated",
      [](const BackendOptions&) -> std::unique_ptr<Backend> { return cuda_emu::make_emulated_cuda_backend(); },
      [] {
        BackendDevices d;
        d.backend = "cuda-emulated";
        d.available = true;
        d.devices.push_back("the CUDA backend on the CPU emulator");
        return d;
      });
#endif
  return registry;
}

// Backends to test: every registered one this machine can run, by name.
std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const BackendDevices& d : test_registry().devices())
    if (d.available) names.push_back(d.backend);
  return names;
}

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const BackendRegistry registry = test_registry();
    BackendOptions one;
    one.threads = 2;
    backend_ = registry.create(GetParam(), one);
    cpu_ = registry.create("cpu", one);
  }
  std::unique_ptr<Backend> backend_, cpu_;
};

TEST_P(BackendOps, EveryOpMatchesTheReferenceAndTheCpuBackend) {
  const std::vector<OpCase> cases = backend_ops::all_cases(20261130u);
  std::set<OpKind> covered, lacking;
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.name);
    covered.insert(c.op);
    // The CPU backend runs every op. Another may lack an op only where its supports() says so
    // (none does today): those are listed, not run.
    if (!backend_->supports(c.op, DType::F32)) {
      ASSERT_NE(GetParam(), "cpu") << "cpu lacks " << op_kind_name(c.op);
      lacking.insert(c.op);
      continue;
    }
    // The casts' bf16 side: a backend that runs them must say it supports bf16 buffers for them.
    if (is_bf16_cast(c.op)) {
      EXPECT_TRUE(backend_->supports(c.op, DType::BF16)) << op_kind_name(c.op);
    }
    // A case on a bf16 buffer runs where the backend says it takes one (the CPU backend always).
    if (c.bf16_buffer && !backend_->supports(c.op, DType::BF16)) {
      ASSERT_NE(GetParam(), "cpu") << "cpu takes no bf16 buffer for " << op_kind_name(c.op);
      continue;
    }
    const OpRun first = run_case(*backend_, c, false);
    const OpRun second = run_case(*backend_, c, false);
    const OpRun on_cpu = run_case(*cpu_, c, false);
    EXPECT_TRUE(first.damaged.empty()) << "written past its end: " << first.damaged.front();
    const backend_ops::Expected want = c.reference();
    for (const auto& [name, expected] : want) {
      ASSERT_TRUE(first.outputs.count(name)) << name;
      const std::vector<float>& got = first.outputs.at(name);
      ASSERT_EQ(got.size(), expected.size()) << name;
      const double against_reference = backend_ops::nmse(got, expected);
      EXPECT_LE(against_reference, c.limit_of(name)) << name << " against the reference";
      EXPECT_TRUE(same_bits(got, second.outputs.at(name))) << name << ": two runs differ";
      EXPECT_LE(backend_ops::nmse(got, on_cpu.outputs.at(name)), c.limit_of(name)) << name << " against cpu";
    }
    // A NaN in an input: NaN/Inf must appear exactly where the CPU backend puts them.
    const OpRun poisoned = run_case(*backend_, c, true), poisoned_cpu = run_case(*cpu_, c, true);
    for (const auto& [name, got] : poisoned.outputs) {
      const std::vector<float>& cpu = poisoned_cpu.outputs.at(name);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::isnan(got[i]), std::isnan(cpu[i])) << name << "[" << i << "]";
        ASSERT_EQ(std::isinf(got[i]), std::isinf(cpu[i])) << name << "[" << i << "]";
      }
    }
  }
  for (int k = 0; k < static_cast<int>(OpKind::Count); ++k)
    EXPECT_TRUE(covered.count(static_cast<OpKind>(k))) << "no case for " << op_kind_name(static_cast<OpKind>(k));
  if (!lacking.empty()) {
    std::string names;
    for (OpKind op : lacking) names += std::string(names.empty() ? "" : ", ") + op_kind_name(op);
    std::cout << "[   NOTE   ] " << GetParam() << " does not support (not run): " << names << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, BackendOps, ::testing::ValuesIn(available_backends()),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');  // gtest: alphanumerics and _
                           return name;
                         });

// The harness itself must be able to fail: a sentinel overwrite and a wrong op are caught.
TEST(BackendOpsHarness, DetectsWritesPastTheEndAndWrongResults) {
  auto backend = BackendRegistry::with_builtins().create("cpu");
  auto stream = backend->create_stream(StreamPriority::High);
  DeviceBuffers bufs(*backend, *stream, kArenaBytes);
  float* a = bufs.upload(std::vector<float>(10, 1.f));
  backend->scale(a, 2.f, 11, *stream);  // one element too many
  ASSERT_EQ(bufs.damaged_guards().size(), 1u);
  EXPECT_GT(backend_ops::nmse(std::vector<float>{1.f, 2.f}, ref::Vec{1.0, 2.001}), 1e-8);
}

}  // namespace
}  // namespace pipelane
