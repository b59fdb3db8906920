// A GPT trained for a few steps through the real PipelineExecutor on one rank's Topology, with
// deterministic tokens: shared by the emulated training tests and the GPU check tool, which
// compare backends (and lanes on/off) on the losses and gradient norms it returns.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parallel/pipeline_executor.h"
#include "parallel/thread_planes.h"

namespace pipelane::cuda_test {

struct TrainRun {
  std::vector<double> loss, grad_norm, step_s;
};

inline GptConfig gpt(int layers, int d_model, int heads, int seq_len, int vocab) {
  GptConfig c;
  c.layers = layers;
  c.d_model = d_model;
  c.heads = heads;
  c.max_seq_len = seq_len;
  c.vocab_size = vocab;
  return c;
}
inline GptConfig tiny_gpt() { return gpt(2, 32, 4, 8, 61); }

// `steps` optimizer steps of `microbatches` x `micro_batch` sequences of `seq` tokens; the waits go
// to `filler` when one is given (lanes); `configure` may set any other option.
inline TrainRun train_steps(Topology& topo, Backend& backend, const GptConfig& model, int pp, int micro_batch,
                            int seq, int microbatches, int steps, GapFiller* filler = nullptr,
                            bool sequence_parallel = false, DType storage = DType::F32,
                            DType gemm_weights = DType::F32,
                            const std::function<void(ExecutorOptions&)>& configure = {}) {
  ExecutorOptions o;
  o.sequence_parallel = sequence_parallel;
  o.storage = storage;
  o.gemm_weights = gemm_weights;
  o.model = model;
  o.schedule = {ScheduleKind::OneFOneB, pp, 1, microbatches};
  o.micro_batch = micro_batch;
  o.seq_len = seq;
  o.seed = 5;
  if (configure) configure(o);
  PipelineExecutor exec(o, topo, backend);
  if (filler) exec.set_gap_filler(filler);
  const float loss_scale = 1.0f / (static_cast<float>(microbatches) * micro_batch * seq);
  const auto token = [&](int step, int mb, std::size_t i, int shift) {
    return static_cast<std::int32_t>((step * 131 + mb * 31 + static_cast<int>(i) * 7 + shift) % model.vocab_size);
  };
  TrainRun out;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int32_t> tok, tgt;
    for (int k = 0; k < microbatches; ++k)
      for (std::size_t i = 0; i < static_cast<std::size_t>(micro_batch) * seq; ++i) {
        tok.push_back(token(step, k, i, 0));
        tgt.push_back(token(step, k, i, 1));
      }
    const auto t0 = std::chrono::steady_clock::now();
    const StepStats st = exec.step(tok.data(), tgt.data(), loss_scale, 1e-2f, step + 1);
    out.step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    out.loss.push_back(st.loss_sum * loss_scale);
    out.grad_norm.push_back(st.grad_norm);
  }
  return out;
}

// The tiny GPT of the tests: `steps` steps of 2 microbatches of 2 x 8 tokens.
inline TrainRun train_tiny(Topology& topo, Backend& backend, int pp = 1, int steps = 3, GapFiller* filler = nullptr) {
  return train_steps(topo, backend, tiny_gpt(), pp, 2, 8, 2, steps, filler);
}

// The tiny GPT on the ranks of `dims` as threads (thread planes), each with its own backend from
// `make_backend`; rank 0's run. Errors of any rank come back in `errors` (one per rank, "" if none).
inline TrainRun train_tiny_on_threads(const ParallelDims& dims,
                                      const std::function<std::unique_ptr<Backend>()>& make_backend, int steps,
                                      std::vector<std::string>& errors) {
  ThreadJob job(dims);
  TrainRun got;
  errors.assign(dims.world(), "");
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < dims.world(); ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Topology topo = job.topology(rank);
        const std::unique_ptr<Backend> backend = make_backend();
        TrainRun mine = train_tiny(topo, *backend, dims.pp, steps);
        if (rank == 0) got = mine;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread& t : ranks) t.join();
  return got;
}

// The tiny GPT on one process (one stage), `steps` steps; `storage` BF16: bf16 storage;
// `gemm_weights` BF16: the GEMMs read a bf16 copy of the weights.
inline TrainRun train_one_process(Backend& backend, int steps = 3, DType storage = DType::F32,
                                  DType gemm_weights = DType::F32) {
  Topology topo = Topology::single_process(backend);
  return train_steps(topo, backend, tiny_gpt(), 1, 2, 8, 2, steps, nullptr, false, storage, gemm_weights);
}

// max_s |a[s] - b[s]|
inline double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t s = 0; s < a.size() && s < b.size(); ++s) d = std::max(d, std::fabs(a[s] - b[s]));
  return d;
}

}  // namespace pipelane::cuda_test
