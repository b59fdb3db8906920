// summary.json as a type: what a training run (ParallelTrainer::run, then `pipelane train` adds
// the unigram baseline and the config file) or a simulation (trainer/sim/sim_report.h) fills, and
// what the console summary, the report, lane plans, lane valuation and the simulator's inputs read.
// JSON only at the edge: to_json writes summary.json, and run_summary_from_json (read_run_summary
// for a file) is the one parser; a value it cannot read is one line naming the file and the key
// ("runs/a/summary.json: cannot read 'parallel.pp': a string, not an integer").
//
// The parts: what both write (steps, time, throughput, the grid, each stage's busy and idle time,
// the bubble, the measured op costs, the lanes); `training` what only a training run knows (its
// step range, the MFU peaks' sources, the straggler, traced steps, skipped steps, the unigram
// baseline, the config); `simulation` what only a simulation knows (the "simulation" block,
// "simulated": true, each stage's idle time by wait kind and memory). Exactly one of the two is
// set in a summary.json; the lanes are a training run's or a simulation's (summary_lanes.h).
//
// Schema versions: kRunSummarySchemaVersion is the layout written now. Version 1 is every
// summary.json written before the type existed: no version key (read as 1, and written back as it
// was, so an old file round-trips byte for byte). Version 2 is version 1 plus "schema_version": 2.
// The parser refuses a version newer than it knows, naming it. Every key of version 1 must be there,
// except the few a lane's own summary has added since (lanes/lane_summary.h reads those as 0).
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/run/straggler.h"
#include "trainer/run/summary_lanes.h"

namespace pipelane {

inline constexpr int kRunSummarySchemaVersion = 2;

// A summary.json that does not read: one line naming the file and the key.
class SummaryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ParallelShape {  // "parallel"
  int tp = 1, dp = 1, pp = 1;
  std::string schedule;
  int virtual_stages = 1;
  int microbatches = 0;  // per replica
  int world() const { return tp * dp * pp; }
};

struct EvalPoint {  // "evals"[]
  int step = 0;
  double val_loss = 0;
};

// What a simulation knows of a stage beyond a run's numbers.
struct SimulatedStage {
  std::map<std::string, double> idle_by_kind_s;  // wait kind name -> seconds
  double memory_bytes = 0;
};

struct StageTime {  // "stages"[]: one pipeline stage, over its ranks
  int stage = 0;
  double busy_s = 0, idle_s = 0, bubble_fraction = 0;
  std::optional<SimulatedStage> simulated;
};

struct MeasuredOpMs {  // "measured_op_ms": mean costs of the compute instructions
  double forward = 0;
  double backward = 0;  // the whole backward: a split one's input-gradient and weight halves
  double backward_weight = 0;
};

// One rank's training arena: what the memory model (parallel/memory_model.h) predicted and the
// arena's high-water mark, the bytes really carved out of it ("memory"[] of a training run;
// absent in summaries written before).
struct ArenaMemory {
  int rank = 0, stage = 0, tp = 0, dp = 0;
  double predicted_bytes = 0, high_water_bytes = 0;
};

struct TrainingPart {
  // What this process ran: a resumed or stopped run counts its own steps only.
  int first_step = 0, last_step = 0, steps_configured = 0;
  std::string peak_source;  // what peak_gflops is
  std::optional<double> peak_gflops_sgemm;
  std::string sgemm_source;
  std::optional<double> mfu_sgemm;
  std::optional<StragglerReport> straggler;         // stage -1: written as null
  std::optional<std::pair<int, int>> traced_steps;  // first and last step in trace.json
  std::int64_t skipped_nonfinite = 0, skipped_spike = 0;
  // `pipelane train` adds these once the run is over.
  std::optional<double> unigram_val_loss;
  std::optional<std::string> config;  // the config file named on the command line
  std::vector<ArenaMemory> memory;     // every rank's, in world-rank order
};

struct SimulationPart {  // the "simulation" block
  std::string cluster, cluster_source, device, device_description;
  double device_memory_bytes = 0, price_per_device_hour = 0;
  std::string price_source, compute_from, lanes_from;
  bool profile_as_measured = false, replicas_identical = true;
  int replicas_simulated = 1, world = 1;
  std::string all_reduce;
  std::vector<double> iteration_ms;
  double utilisation_training_only = 0;
  std::optional<double> utilisation_with_lanes;  // null without lanes
  double tokens_per_s_lanes_off = 0;
  double wall_s = 0;  // how long the simulation took
};

struct RunSummary {
  int schema_version = kRunSummarySchemaVersion;
  int steps = 0;
  double tokens = 0, train_seconds = 0;
  std::optional<double> final_loss, final_val_loss;  // null in a simulation
  std::vector<EvalPoint> evals;
  double step_ms_median = 0, tokens_per_s = 0, flops_per_token = 0;
  double peak_gflops = 0, mfu = 0;  // against the peak of every rank's share of the machine
  ParallelShape parallel;
  std::vector<StageTime> stages;
  double bubble_fraction_measured = 0, bubble_fraction_theoretical = 0;
  MeasuredOpMs measured_op_ms;
  double training_arena_bytes_rank0 = 0;
  int resumed_from_step = 0;
  std::optional<TrainingLanes> lanes;             // a training run with lanes on
  std::optional<SimulatedLanes> simulated_lanes;  // a simulation with lanes
  std::optional<TrainingPart> training;
  std::optional<SimulationPart> simulation;
};

nlohmann::json to_json(const RunSummary& summary);

// The parser. `where` names the source in errors (a file's path). SummaryError, one line.
RunSummary run_summary_from_json(const nlohmann::json& json, const std::string& where);
// The file at `path`: SummaryError naming it when it cannot be opened, is not JSON or does not read.
RunSummary read_run_summary(const std::string& path);

}  // namespace pipelane
