// What one microbatch costs on each virtual stage of a job, from the model's own size tables:
// FLOPs of the forward, input-gradient and weight-gradient passes (and what recomputation reruns
// before them), tensor-parallel all-reduces, parameters and the optimizer's share of them. The
// training memory of a job is the memory model's (sim/job_memory.h).
#pragma once
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/recompute.h"
#include "parallel/schedule.h"
#include "runtime/tensor.h"

namespace pipelane::sim {

struct JobSpec {
  GptConfig model;
  int seq_len = 128;
  int micro_batch = 1;
  int tp = 1;
  int dp = 1;
  ScheduleSpec schedule{ScheduleKind::OneFOneB, 1, 1, 1};
  std::string layers_per_stage;  // "" splits evenly; else one count per virtual stage
  // Where the grid goes on the devices: false (pipelane's grid, tp fastest, then dp, then pp:
  // stages across sites, tensor and data parallelism inside them) or true (tp, pp, dp: every
  // site holds whole pipelines, data parallelism spans the sites - the placement that ignores
  // the WAN, simulated as a baseline only).
  bool replicas_across_sites = false;
  // The memory features ([train] recompute, distributed_optimizer; [parallel] sequence_parallel).
  // What recomputation keeps shapes the memory, what it reruns is priced in the backward; the
  // distributed optimizer (ZeRO-1 over dp, nothing sharded at dp 1) keeps 1/dp of the optimizer
  // state and turns the gradient all-reduce into a reduce-scatter and an all-gather. Sequence
  // parallelism beside tp (GptStage): the residual stream's activations and the p2p messages hold
  // a tp rank's rows only; the tp collectives move the same bytes as the all-reduces they replace
  // (a reduce-scatter and an all-gather are the two halves of a ring all-reduce), plus the
  // backward's re-gathers.
  RecomputeOptions recompute;
  bool distributed_optimizer = false;
  bool sequence_parallel = false;
  // [train] gemm_weights: F32, or BF16 (a bf16 copy of the weights the GEMMs read, 2 bytes a
  // parameter). Under the distributed optimizer that shards the fp32 masters too
  // (masters_sharded(), parallel/memory_model.h's rule): the updated parameters are all-gathered in
  // bf16, but for the tensors the passes read outside GEMMs (norms, biases, the embedding lookup),
  // which go in fp32.
  DType gemm_weights = DType::F32;

  int world() const { return tp * dp * schedule.pp; }
  bool split_backward() const { return schedule.kind == ScheduleKind::ZeroBubbleH1; }
  // dp ranks the optimizer state is cut over (1: replicated).
  int optimizer_shards() const { return distributed_optimizer ? dp : 1; }
  bool masters_sharded() const;  // parallel/optimizer_shards.h's rule
  // tp ranks the [B, T, C] activations are cut over (1: tensor parallelism alone).
  int sequence_shards() const { return sequence_parallel ? tp : 1; }
  double tokens_per_iteration() const {
    return static_cast<double>(seq_len) * micro_batch * schedule.microbatches * dp;
  }
};

// One virtual stage on one tensor-parallel rank, per microbatch.
struct ChunkShape {
  StageRange range;
  double fwd_flops = 0;         // as the executor runs it: the last stage's Fwd also runs the
                                // head's backward (fused with its forward, llm.c style)
  double bwd_input_flops = 0;   // B: the input gradient (ZB-H1's Bwd)
  double bwd_weight_flops = 0;  // W: the weight gradient (ZB-H1's BwdWeight)
  int tp_all_reduces_fwd = 0;   // all-reduces of one activation (B*T*d) inside Fwd / inside B
  int tp_all_reduces_bwd = 0;   // (a reduce-scatter + an all-gather, or two all-gathers, count as one)
  int tp_all_reduces_bwd_weight = 0;  // inside W (sequence parallelism's re-gathers only)
  // Recomputation (model/recompute.h): forward work rerun right before B (selective: the
  // attention core of every layer; full: the recomputed layers' whole forward, with their
  // tensor-parallel all-reduces) and, under the split backward, before W again (full only: B's
  // rerun is gone by then). Forward FLOPs, priced as the forward's.
  double rerun_b_flops = 0, rerun_w_flops = 0;
  int rerun_b_all_reduces = 0, rerun_w_all_reduces = 0;
  double params = 0;            // this rank's parameters
  double optimizer_params = 0;  // those its optimizer step updates: params, or its ZeRO shard
  double fp32_read_params = 0;  // sharded masters: the params read outside GEMMs (gathered in fp32)
  double tied_embedding_params = 0;  // wte elements summed with the other end's copy at GradSync
};

struct JobShape {
  std::vector<ChunkShape> virtual_stages;  // pp * v of them, in pipeline order
  double message_elements = 0;             // B*T*d (/tp with sequence parallelism): one p2p activation or gradient
  double tp_collective_elements = 0;       // B*T*d: one tensor-parallel all-reduce (or reduce-scatter + all-gather)
  std::vector<std::vector<int>> in_flight; // [stage][chunk]: most microbatches held at once

  const ChunkShape& chunk(const ScheduleSpec& spec, int stage, int chunk) const {
    return virtual_stages[virtual_stage(spec, stage, chunk)];
  }
  double stage_params(const ScheduleSpec& spec, int stage) const;
  double stage_optimizer_params(const ScheduleSpec& spec, int stage) const;
};

// std::invalid_argument (one line) for a spec the model cannot be split into: layers not divisible,
// tp not dividing the heads, a bad layers_per_stage.
JobShape job_shape(const JobSpec& job);

// Training FLOPs of one iteration of the whole job (every rank): the sum over virtual stages and
// microbatches and replicas, tensor parallelism undone; the model's FLOPs (recomputation's reruns
// are not counted, as model FLOPs utilisation does not count them).
double job_flops_per_iteration(const JobSpec& job, const JobShape& shape);

}  // namespace pipelane::sim
