// The collective save of a checkpoint (the layout of root and of a checkpoint is described in
// trainer/checkpoint/catalog.h and trainer/checkpoint/checkpoint.h).
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <string>

#include "model/gpt_config.h"
#include "parallel/pipeline_executor.h"
#include "parallel/topology.h"
#include "trainer/checkpoint/lane_file.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/progress.h"

namespace pipelane {

// Collective over `topo.world`. Rank 0 clears what killed saves left under `root` and creates
// root/step_XXXXXXXX.saving; every (pp, tp) rank with dp rank 0 writes its shard there and every
// rank with `lanes` its lane file; rank 0 gathers what they wrote, writes the manifest, renames the
// directory to root/step_XXXXXXXX (replacing a checkpoint of the same step, or moving a damaged
// one aside to .damaged), then prunes to `keep_last` complete checkpoints (never the new one).
// Returns the checkpoint directory.
//
// A failure on any rank (a full disk, a read-only directory) removes the whole .saving directory
// and every rank throws CheckpointSaveError with the same line: which rank failed, why, and the
// newest complete checkpoint a restart resumes from. `lanes`: this rank's lane state, null when
// its lanes are off.
std::string save_checkpoint(const std::string& root, int step, PipelineExecutor& exec, Topology& topo,
                            const TrainingProgress& progress, const GptConfig& model,
                            const CheckpointTopology& topology, const std::string& config_ini, int keep_last,
                            const LaneStates* lanes = nullptr);

}  // namespace pipelane
