// The one error type of checkpoints: its message is one line naming the directory or file and
// what is wrong with it, and where it helps, how to resume from the previous checkpoint.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <stdexcept>

namespace pipelane {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A save that failed on some rank: every rank of the job throws it with the same message (the
// ranks agreed on the failure inside the save), so nobody is left waiting in a collective.
class CheckpointSaveError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

}  // namespace pipelane
