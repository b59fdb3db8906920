// How a run starts: fresh, or from which checkpoint ([run] resume and [run] overwrite). Nothing
// here loses a model: a fresh run never silently shares a directory with another run's checkpoints,
// `auto` never restarts from step 0 past a checkpoint it cannot read, and a checkpoint is only
// ever moved aside (archive, .damaged), never deleted, by these decisions.
//
//   resume = auto                the newest checkpoint under <run dir>/checkpoints, or a fresh start
//                                when there is none; stops with one line when the newest one's
//                                manifest does not read (naming the previous complete one)
//   resume = auto-skip-damaged   the newest checkpoint whose every file checks (manifest, sizes,
//                                CRCs); each damaged one on the way is moved aside to
//                                step_N.damaged, with a line saying which and why
//   resume = none                a fresh start; refused when the directory holds checkpoints
//   resume = PATH                that checkpoint; refused when this run's directory holds other
//                                checkpoints it would overwrite or mix with (newer ones, or any when
//                                PATH is elsewhere)
//   overwrite = archive          instead of refusing, move those checkpoints (and, for a fresh
//                                run, the earlier run's metrics, config and summary) into
//                                <run dir>/archive/<UTC time>/
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <optional>
#include <string>
#include <vector>

#include "parallel/control_plane.h"

namespace pipelane {

struct ResumeRequest {
  std::string run_dir;
  std::string resume = "auto";       // auto | auto-skip-damaged | none | PATH
  std::string overwrite = "refuse";  // refuse | archive
};

struct ResumePlan {
  std::optional<std::string> dir;  // the checkpoint to load; nullopt: start fresh
  std::string fallback;            // what to do when loading `dir` fails: the clause for the error line
  std::vector<std::string> notes;  // lines for the console: leftovers cleared, checkpoints skipped or archived
};

// One process decides (and moves files). CheckpointError with one line when the run must not start.
ResumePlan decide_resume(const ResumeRequest& request);
// Collective over `world`: rank 0 decides, every rank gets the same plan or the same error.
ResumePlan plan_resume(const ResumeRequest& request, ControlPlane& world);

// CheckpointError unless every file `dir`'s manifest lists is there with its size and CRC-32.
void verify_checkpoint(const std::string& dir);

}  // namespace pipelane
