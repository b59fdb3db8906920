// The Llama family on the CUDA backend built for the CPU (kernels emulated, CUDA runtime faked,
// GEMMs interpreted): a tiny Llama (RMSNorm, RoPE with Llama 3 scaling, SwiGLU, 4 query heads on
// 2 kv heads, untied head, no biases) trained through the real PipelineExecutor against the CPU
// backend within training_parity.h's 1e-5 relative, in one process (deferred streams) and as two
// pipeline stages on threads; and the GQA attention in bf16 compute against the CPU backend's
// bf16 mode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"
#include "tests/cuda/training_parity.h"

namespace pipelane::cuda_test {
namespace {

GptConfig tiny_llama() {
  GptConfig c = gpt(2, 32, 4, 8, 61);
  c.arch = ModelArch::Llama;
  c.apply_arch_defaults(ModelArch::Llama);
  c.kv_heads = 2;
  c.ffn_hidden = 40;  // not a multiple of 32
  c.rope_theta = 10000;
  c.rope_scaling = RopeScaling{8, 1, 4, 4};  // an original context shorter than some wavelengths
  return c;
}

TrainRun train_llama(Backend& backend, int pp, Topology& topo) {
  return train_steps(topo, backend, tiny_llama(), pp, 2, 8, 2, 3);
}

TEST(CudaEmulatedLlama, OneProcessMatchesTheCpuBackend) {
  ASSERT_TRUE(tiny_llama().problem().empty()) << tiny_llama().problem();
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  const auto cpu = make_cpu_backend(1);
  Topology cpu_topo = Topology::single_process(*cpu);
  const TrainRun want = train_llama(*cpu, 1, cpu_topo);
  const auto cuda = cuda_emu::make_emulated_cuda_backend();
  Topology topo = Topology::single_process(*cuda);
  expect_close(train_llama(*cuda, 1, topo), want);
}

TEST(CudaEmulatedLlama, TwoStagesOnThreadsMatchTheCpuBackend) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Immediate);
  const auto cpu = make_cpu_backend(1);
  Topology cpu_topo = Topology::single_process(*cpu);
  const TrainRun want = train_llama(*cpu, 1, cpu_topo);
  ParallelDims dims;
  dims.pp = 2;
  ThreadJob job(dims);
  TrainRun got;
  std::vector<std::string> errors(dims.world());
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < dims.world(); ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Topology topo = job.topology(rank);
        const auto backend = cuda_emu::make_emulated_cuda_backend();
        TrainRun mine = train_llama(*backend, dims.pp, topo);
        if (rank == 0) got = mine;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread& t : ranks) t.join();
  for (const std::string& e : errors) ASSERT_EQ(e, "");
  expect_close(got, want);
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
}

// GQA attention forward and backward in bf16 compute. Both backends round the same fp32 values
// (q, k, v, the probabilities, dy, dpreatt) to bf16 where their GEMMs read them; what differs is
// the fp32 arithmetic around those roundings (sum order, expf against the CPU's polynomial), which
// moves a value across a bf16 rounding midpoint only rarely (test_cuda_autocast.cpp's bound: at
// most 0.25 of the bf16-vs-fp32 difference). So the emulated run must be within 0.25 of the CPU's
// bf16-vs-fp32 difference of the CPU bf16 run, in RMS over each output, and that difference must
// be real (a backend that skipped a rounding would sit at the fp32 result, a whole difference away).
double rms_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

struct GqaOutputs {
  std::vector<float> out, dq, dk, dv;
};

GqaOutputs run_gqa(Backend& be, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                   const std::vector<float>& dout, int B, int T, int NH, int KVH, int hs) {
  const auto stream = be.create_stream(StreamPriority::High);
  const auto arena = be.create_arena("gqa", std::size_t{16} << 20);
  const auto put = [&](const std::vector<float>& h) {
    float* d = arena->allocate_n<float>(h.size());
    be.copy(d, h.data(), h.size() * sizeof(float), *stream);
    return d;
  };
  const std::size_t nq = q.size(), nkv = k.size();
  float *pq = put(q), *pk = put(k), *pv = put(v), *pd = put(dout);
  float* att = arena->allocate_n<float>(be.attention_gqa_saved_floats(B, T, NH, hs));
  float *out = arena->allocate_n<float>(nq), *dq = arena->allocate_n<float>(nq);
  float *dk = arena->allocate_n<float>(nkv), *dv = arena->allocate_n<float>(nkv);
  be.attention_forward_gqa(out, att, pq, pk, pv, B, T, NH, KVH, hs, *stream);
  be.attention_backward_gqa(dq, dk, dv, pd, pq, pk, pv, out, att, B, T, NH, KVH, hs, *stream);
  GqaOutputs r{std::vector<float>(nq), std::vector<float>(nq), std::vector<float>(nkv), std::vector<float>(nkv)};
  be.copy(r.out.data(), out, nq * sizeof(float), *stream);
  be.copy(r.dq.data(), dq, nq * sizeof(float), *stream);
  be.copy(r.dk.data(), dk, nkv * sizeof(float), *stream);
  be.copy(r.dv.data(), dv, nkv * sizeof(float), *stream);
  stream->synchronize();
  return r;
}

TEST(CudaEmulatedLlama, GqaAttentionInBf16ComputeMatchesTheCpuBackendInBf16) {
  const int B = 2, T = 9, NH = 6, KVH = 2, hs = 10;
  std::mt19937 rng(22);
  std::normal_distribution<float> dist(0.f, 1.f);
  const auto random = [&](std::size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = dist(rng);
    return x;
  };
  const std::size_t nq = static_cast<std::size_t>(B) * T * NH * hs, nkv = static_cast<std::size_t>(B) * T * KVH * hs;
  const auto q = random(nq), k = random(nkv), v = random(nkv), dout = random(nq);
  const GqaOutputs fp32 = run_gqa(*make_cpu_backend(1), q, k, v, dout, B, T, NH, KVH, hs);
  const GqaOutputs want = run_gqa(*make_cpu_backend(1, DType::BF16), q, k, v, dout, B, T, NH, KVH, hs);
  cuda::CudaBackendConfig config = cuda_emu::emulated_backend_config();
  config.compute = DType::BF16;
  const GqaOutputs got = run_gqa(*cuda_emu::make_emulated_cuda_backend(config), q, k, v, dout, B, T, NH, KVH, hs);
  const std::pair<const char*, std::vector<float> GqaOutputs::*> fields[] = {
      {"out", &GqaOutputs::out}, {"dq", &GqaOutputs::dq}, {"dk", &GqaOutputs::dk}, {"dv", &GqaOutputs::dv}};
  for (const auto& [name, field] : fields) {
    const double effect = rms_difference(want.*field, fp32.*field);
    EXPECT_GT(effect, 1e-4) << name << ": the CPU's bf16 mode rounds nothing";
    EXPECT_LE(rms_difference(got.*field, want.*field), 0.25 * effect) << name;
  }
}

}  // namespace
}  // namespace pipelane::cuda_test
