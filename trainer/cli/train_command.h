#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

// `pipelane train`: argv[0] is "train". Returns the process exit code; every error is one line
// on stderr ("pipelane train: ...") and a non-zero code.
int train_command(int argc, char** argv);

}  // namespace pipelane
