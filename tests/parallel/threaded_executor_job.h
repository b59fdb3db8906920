// A training job of PipelineExecutors as threads of this process (thread planes), for the executor
// tests that compare two runs differing in one feature: every rank trains `steps` steps of the
// same deterministic tokens (a global microbatch g of step s holds tokens (s*131 + g*31 + k*7) %
// vocab), then hands back its parameters, gradients, arena high-water mark and the memory model's
// prediction, and the bytes of every transfer it made. Hooks on each rank's thread let a test load
// a state before the first step and read one out after the last.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/pipeline_executor.h"
#include "parallel/thread_planes.h"
#include "runtime/cpu/cpu_backend.h"

namespace pipelane::threaded_job {

// A lane stand-in: real arithmetic on its own backend in every wait, until the transfer is there.
class ComputingFiller final : public GapFiller {
 public:
  ComputingFiller() : backend_(make_cpu_backend(1)), stream_(backend_->create_stream(StreamPriority::Low)) {
    a_.assign(64 * 64, 0.5f), b_.assign(64 * 64, 0.25f), c_.assign(64 * 64, 0.f);
  }
  void fill(int, int, WaitKind, const std::function<bool()>& arrived) override {
    do {
      backend_->matmul_forward(c_.data(), a_.data(), b_.data(), nullptr, 64, 64, 64, *stream_);
      ++steps;
    } while (!arrived());
  }
  void end_iteration(int) override {}
  int steps = 0;

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stream> stream_;
  std::vector<float> a_, b_, c_;
};

struct RankOut {
  std::vector<float> params, grads;  // every chunk's, back to back
  std::size_t high_water = 0, predicted = 0;
  double activations = 0;                    // the memory model's activations category
  double optimizer = 0;                      // and its optimizer-state category
  int min_in_flight = 0;                     // over the rank's chunks
  std::vector<std::size_t> transfer_bytes;   // every Send/Recv of every step, in order
};
struct JobOut {
  std::vector<double> loss, grad_norm;  // rank 0's, per step
  std::vector<RankOut> ranks;
  int filler_steps = 0;
};

// Called on each rank's thread with its executor and place in the grid.
using RankHook = std::function<void(PipelineExecutor&, const Topology&)>;

struct JobSpec {
  ParallelDims dims;
  ExecutorOptions options;  // its schedule's microbatches are per replica: global_microbatches / dp
  int global_microbatches = 4;
  int steps = 2;
  int first_step = 1;  // steps first_step .. first_step + steps - 1 (their data and AdamW's t)
  bool filler = false;
  DType compute = DType::F32;  // each rank's CPU backend (1 thread)
  RankHook before_steps;  // e.g. load a checkpoint's state, as a resume does
  // After the RankOut is recorded: its high-water mark is training's alone, whatever the hook does
  // (e.g. checkpoint_view(true), a collective every rank must call).
  RankHook after_steps;
};

// The executor tests' model: 4 layers, d_model 32, 4 heads, 16 positions, 61 tokens; as a Llama
// (RMSNorm, RoPE, SwiGLU of width 48, 2 kv heads) with arch = Llama.
inline GptConfig tiny_gpt(ModelArch arch = ModelArch::Gpt2) {
  GptConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 16;
  c.vocab_size = 61;
  if (arch == ModelArch::Llama) {
    c.apply_arch_defaults(ModelArch::Llama);
    c.kv_heads = 2;
    c.ffn_hidden = 48;
  }
  return c;
}

// A job of it on `dims` with schedule `kind` (v chunks a stage): microbatches of 2 x 16 tokens,
// seed 5, 4 global microbatches, 2 steps. Callers set what their test varies.
inline JobSpec tiny_job(ParallelDims dims, ScheduleKind kind, int v, ModelArch arch = ModelArch::Gpt2) {
  JobSpec s;
  s.dims = dims;
  s.options.model = tiny_gpt(arch);
  s.options.schedule = {kind, dims.pp, v, 0};  // microbatches: the runner's, per replica
  s.options.micro_batch = 2;
  s.options.seq_len = 16;
  s.options.seed = 5;
  s.global_microbatches = 4;
  s.steps = 2;
  return s;
}

inline JobOut run(const JobSpec& spec) {
  const ParallelDims dims = spec.dims;
  ThreadJob job(dims);
  JobOut out;
  out.ranks.resize(dims.world());
  std::mutex mutex;
  std::vector<std::string> errors(dims.world());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < dims.world(); ++rank)
    threads.emplace_back([&, rank] {
      try {
        Topology topo = job.topology(rank);
        const std::unique_ptr<Backend> backend = make_cpu_backend(1, spec.compute);
        ExecutorOptions o = spec.options;
        o.schedule.microbatches = spec.global_microbatches / dims.dp;
        PipelineExecutor exec(o, topo, *backend);
        ComputingFiller filler;
        if (spec.filler) exec.set_gap_filler(&filler);
        if (spec.before_steps) spec.before_steps(exec, topo);
        const int tokens = o.micro_batch * o.seq_len, vocab = o.model.vocab_size;
        const float loss_scale = 1.0f / static_cast<float>(spec.global_microbatches * tokens);
        RankOut mine;
        for (int step = spec.first_step - 1; step < spec.first_step - 1 + spec.steps; ++step) {
          std::vector<std::int32_t> tok, tgt;
          for (int k = 0; k < o.schedule.microbatches * tokens; ++k) {
            const int g = (k / tokens) * dims.dp + topo.me.dp;
            tok.push_back((step * 131 + g * 31 + k * 7) % vocab);
            tgt.push_back((step * 131 + g * 31 + k * 7 + 1) % vocab);
          }
          const StepStats st = exec.step(tok.data(), tgt.data(), loss_scale, 1e-2f, step + 1);
          if (rank == 0) out.loss.push_back(st.loss_sum), out.grad_norm.push_back(st.grad_norm);
          for (const InstrRecord& r : st.records)
            if (r.bytes > 0) mine.transfer_bytes.push_back(r.bytes);
        }
        // The parameters through parameters_view (collective over dp: sharded masters are gathered).
        const CheckpointView parameters = exec.parameters_view();
        for (const ChunkState& c : parameters.chunks) {
          const std::size_t n = c.layout->total_floats(), at = mine.params.size();
          mine.params.resize(at + n), mine.grads.resize(at + n);
          backend->copy(mine.params.data() + at, c.params, n * sizeof(float), exec.compute_stream());
          backend->copy(mine.grads.data() + at, c.grads, n * sizeof(float), exec.compute_stream());
        }
        exec.compute_stream().synchronize();
        mine.high_water = exec.arena_high_water();
        mine.predicted = static_cast<std::size_t>(exec.predicted_memory().total());
        mine.activations = exec.predicted_memory().activations;
        mine.optimizer = exec.predicted_memory().optimizer;
        mine.min_in_flight = spec.global_microbatches;
        for (const ChunkMemory& ch : exec.predicted_memory().chunks)
          mine.min_in_flight = std::min(mine.min_in_flight, ch.in_flight);
        if (spec.after_steps) spec.after_steps(exec, topo);
        std::lock_guard lock(mutex);
        out.ranks[rank] = std::move(mine);
        out.filler_steps += filler.steps;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < dims.world(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return out;
}

}  // namespace pipelane::threaded_job
