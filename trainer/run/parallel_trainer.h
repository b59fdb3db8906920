// The training loop over a pipeline executor: any tp x dp x pp grid, any schedule, and the
// single process as the grid of one. Rank 0 writes metrics, trace.json and the summary.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "model/gpt_config.h"
#include "parallel/topology.h"
#include "runtime/backend.h"
#include "trainer/run/lane_valuation.h"
#include "trainer/run/run_directory.h"
#include "trainer/run/run_summary.h"
#include "trainer/config/train_options.h"
#include "trainer/run/training_data.h"

namespace pipelane {

// What MFU is measured against (trainer/run/machine_peak.h): one rank's peak `gflops`, named by
// `source`, and optionally a measured sgemm beside it.
struct MfuPeaks {
  double gflops = 0;
  std::string source;
  std::optional<double> sgemm_gflops;
  std::string sgemm_source;
};

class ParallelTrainer {
 public:
  // `backend` runs training and, when [lanes] are enabled for this rank's stage, its lanes.
  ParallelTrainer(const TrainOptions& opts, const TrainingData& data, Topology& topo,
                  double peak_gflops, Backend& backend);
  ~ParallelTrainer();
  // Every rank calls this; `run`, `console` and `lane_valuation` are used on rank 0 only (may be
  // null elsewhere), and only rank 0's summary is filled. The summary's lanes are valued by
  // `lane_valuation`.
  RunSummary run(RunDirectory* run, std::FILE* console, const LaneValuation& lane_valuation);
  // Every rank, before run(): loads parameters, AdamW moments, sampler position and fault
  // counters from a checkpoint directory saved at any (pp, tp). Returns the step it resumes at.
  // Throws CheckpointError (trainer/checkpoint/checkpoint.h) with one line.
  int restore(const std::string& checkpoint_dir);
  // Every rank, before run(), on a fresh run instead of restore(): parameters from a checkpoint
  // (any grid) or a Hugging Face GPT-2 directory ([run] init_from); AdamW moments, step and data
  // order start fresh. CheckpointError with one line when the shapes differ.
  void init_from(const std::string& path);
  // Before run(); without it MFU is against the constructor's peak_gflops, unnamed.
  void set_mfu_peaks(const MfuPeaks& peaks);
  std::size_t arena_bytes() const;  // this rank's training arena

 private:
  struct State;
  struct Loop;  // one run(): the steps and what they measure
  std::unique_ptr<State> s_;
};

}  // namespace pipelane
