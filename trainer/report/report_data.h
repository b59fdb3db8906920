// What `pipelane report` shows of one run directory, read from its files into typed values:
// metrics.jsonl (per step), summary.json (once the run finished), trace.json (the traced steps),
// samples.jsonl (text samples) and config.ini (the configuration as resolved).
// Each file may be missing (a run still going, or one that failed): what it would give is then
// absent and `notes` says why.
#pragma once
#include "trainer/report/layer.h"  // trainer/README.md: the layers
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pipelane::report {

struct StepMetrics {
  int step = 0;
  double loss = 0, tokens_per_s = 0, step_ms = 0;
  std::optional<double> mfu, mfu_sgemm, lr, grad_norm;
  bool skipped = false;
};

struct TextSample {
  int step = 0;
  std::string prompt, text;  // as samples.jsonl holds them (the text need not be valid UTF-8)
};

struct ValidationPoint {
  int step = 0;
  double loss = 0;
};

// One pipeline stage's time per traced step (averaged over its ranks and the traced steps after
// the first): compute, then the waits by kind (Warmup, Cooldown, P2PWait, SyncWait), then the
// rest of the step (sends, the optimizer, bookkeeping).
struct StageTime {
  int stage = 0;
  double compute_ms = 0;
  std::map<std::string, double> wait_ms;  // by wait kind
  double other_ms = 0;
};

struct LaneNumbers {
  std::string work_unit;
  double units = 0, lane_s = 0, harvested_s = 0, overrun_s = 0, steps = 0;
};

// The lanes' cost that overrun does not show, as control gaps estimated it (summary.json's
// "interference"; absent in a simulation and in runs from before it).
struct InterferenceView {
  std::optional<double> estimated_s, stderr_s;  // none: not estimated, `why_not` says why
  std::string why_not;
  long control_gaps = 0, lane_gaps = 0;
};

struct LaneStage {
  int stage = 0;
  double bubble_s = 0, harvested_s = 0, overrun_s = 0;
  std::map<std::string, LaneNumbers> lanes;
  std::optional<InterferenceView> interference;
};

struct LanesSummary {
  double bubble_s = 0, harvested_s = 0, overrun_s = 0, harvest_fraction = 0;
  double harvest_fraction_after_profiling = 0;
  std::optional<double> overhead_fraction, cost_saving_fraction;
  std::optional<InterferenceView> interference;
  // (overrun + interference) against the implied lanes-off training time, and its standard error.
  std::optional<double> estimated_overhead_fraction, estimated_overhead_fraction_stderr;
  bool cost_saving_estimated = false;  // its net figure from the estimate, not a lanes-off run
  std::map<std::string, LaneNumbers> lanes;
  std::vector<LaneStage> stages;
  std::vector<std::string> quarantined;  // "LANE on rank R: reason"
};

// One slice of the timeline, seconds from its rank's step start.
struct TraceSlice {
  std::string name;  // Fwd/Bwd/..., the wait kind, or the lane name
  double start_s = 0, end_s = 0;
  int microbatch = -1;
  double units = 0;  // lane steps
};

struct RankTimeline {
  int rank = 0;
  std::string track;  // "pp 0 tp 0 dp 0"-style, as the trainer named it
  std::vector<TraceSlice> instructions, waits, lane_steps;
};

struct IterationTimeline {
  int step_index = 0;  // 0-based position among the traced steps
  int step = 0;        // the training step (1-based), when known
  double span_s = 0;   // the longest rank's step
  std::vector<RankTimeline> ranks;
};

// What the page shows of summary.json (trainer/run/run_summary.h), a training run's or a
// simulation's alike.
struct SummaryView {
  int steps_run = 0;
  double tokens = 0, train_seconds = 0, tokens_per_s = 0;
  std::optional<double> mfu, mfu_sgemm, peak_gflops, peak_gflops_sgemm;
  std::string peak_source;  // what `mfu` is measured against
  std::optional<double> final_val_loss, unigram_val_loss;
  double final_loss = 0;
  int tp = 1, dp = 1, pp = 1, microbatches = 0;
  std::string schedule;
  std::optional<double> bubble_measured, bubble_theoretical;
  std::string straggler;  // the summary's sentence, when it named one
  std::optional<double> training_arena_bytes_rank0;  // what summary.json records of memory
  std::optional<LanesSummary> lanes;
};

struct RunData {
  std::string dir;
  std::string name;  // the directory's last component
  std::vector<StepMetrics> steps;
  std::vector<ValidationPoint> validation;
  std::optional<SummaryView> summary;
  std::vector<StageTime> stage_times;
  std::optional<IterationTimeline> timeline;
  std::vector<TextSample> samples;
  std::string config_ini;  // "" when the run directory has none
  std::vector<std::string> notes;  // files missing or unreadable, in words
};

// Reads `dir`. std::runtime_error (one line naming the path) when it is not a directory or holds
// none of the three files; a damaged file adds a note instead. `traced_step`: which traced step
// the timeline shows (0-based among those traced); -1 picks the last one (lanes are then past
// their profiling iterations).
RunData load_run(const std::string& dir, int traced_step = -1);

}  // namespace pipelane::report
