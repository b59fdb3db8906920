// What a checkpoints root (<run dir>/checkpoints) holds, and the directory names a save uses.
//
//   step_00000120/          a checkpoint: complete when its manifest reads and checks (the
//                           manifest is written last), damaged when manifest.json is there but
//                           does not read, interrupted when there is none (left by a save of an
//                           older pipelane that was killed)
//   step_00000120.saving/   a save in progress; renamed to step_00000120 once complete
//   step_00000120.replaced/ the checkpoint a save of the same step is replacing, for a moment
//   step_00000120.damaged/  a damaged checkpoint moved aside by a save of the same step (kept)
//
// Only step_N directories are checkpoints; the others are left by a save that was killed, and
// clean_interrupted_saves puts the root back in order.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipelane {

// <run dir>/checkpoints: where a run's checkpoints live (and an archive's, archive/<time>/checkpoints).
std::string checkpoints_root(const std::string& run_dir);

enum class CheckpointState { Complete, Damaged, Interrupted };

struct CheckpointEntry {
  int step = 0;
  std::string dir;
  CheckpointState state = CheckpointState::Interrupted;
  std::string problem;  // why it is damaged: the manifest's error line
};

// Every step_N directory under `root`, oldest first (none when root does not exist).
std::vector<CheckpointEntry> list_checkpoints(const std::string& root);
// The complete ones: (step, dir), oldest first.
std::vector<std::pair<int, std::string>> complete_checkpoints(const std::string& root);
std::optional<std::string> newest_complete_checkpoint(const std::string& root);
// What a command given a model path reads: the path itself when it holds a manifest (or is not a
// run directory), else a run directory's newest complete checkpoint, so `generate --model runs/mine`
// works on any finished run (every run ends with a checkpoint unless checkpoint_every = 0).
std::string checkpoint_of(const std::string& path);

std::string staging_dir_name(int step);  // "step_00000120.saving"

// Removes the leftovers of saves that were killed: staging directories (partial files included)
// and step_N directories without a manifest; puts back a checkpoint whose replacement by a save of
// the same step was interrupted. Damaged checkpoints are never removed. Returns what it removed.
std::vector<std::string> clean_interrupted_saves(const std::string& root);

// Moves `dir` (a damaged checkpoint) aside to DIR.damaged (DIR.damaged-2, ... when taken), where
// no reader looks and nothing removes it; returns the new path.
std::string move_aside_damaged(const std::string& dir);

}  // namespace pipelane
