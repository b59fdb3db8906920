// What one microbatch costs on each virtual stage of a job, from the model's own size tables:
// FLOPs of the forward, input-gradient and weight-gradient passes, tensor-parallel all-reduces,
// parameters, stored activations and the training memory of every stage under the schedule's
// in-flight bound (the arena the executor reserves).
#pragma once
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "parallel/schedule.h"

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
  // Sequence parallelism beside tp (GptStage): the residual stream's activations and the p2p
  // messages hold a tp rank's rows only; the tp collectives move the same bytes as the all-reduces
  // they replace (a reduce-scatter and an all-gather are the two halves of a ring all-reduce).
  bool sequence_parallel = false;

  int world() const { return tp * dp * schedule.pp; }
  bool split_backward() const { return schedule.kind == ScheduleKind::ZeroBubbleH1; }
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
  double params = 0;            // this rank's parameters
  double tied_embedding_params = 0;  // wte elements summed with the other end's copy at GradSync
  double activation_bytes = 0;  // pipelane's fp32 layout, per microbatch in flight
  double scratch_bytes = 0;
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
  // Training memory of each stage: parameters, gradients and both AdamW moments (4 x 4 bytes a
  // parameter: fp32 in pipelane; bf16 weights and gradients plus fp32 master weights and moments
  // in mixed precision come to the same 16), scratch, and per microbatch in flight its
  // activations and three message buffers. Activations and messages at element_bytes per
  // element (4: pipelane's fp32 layout, exactly the executor's arena; 2: the same in bf16).
  std::vector<double> stage_memory_bytes(const ScheduleSpec& spec, int element_bytes) const;
};

// std::invalid_argument (one line) for a spec the model cannot be split into: layers not divisible,
// tp not dividing the heads, a bad layers_per_stage.
JobShape job_shape(const JobSpec& job);

// Training FLOPs of one iteration of the whole job (every rank): the sum over virtual stages and
// microbatches and replicas, tensor parallelism undone.
double job_flops_per_iteration(const JobSpec& job, const JobShape& shape);

}  // namespace pipelane::sim
