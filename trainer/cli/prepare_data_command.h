// `pipelane prepare-data`: text files in, one HDF5 token store out (see datasets/token_store.h).
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

// argv[0] is "prepare-data". Returns 0 on success; on error prints one line
// "pipelane prepare-data: <message>" to stderr, returns 1 (2 for a command line the option parser
// refuses) and leaves no output file behind.
int prepare_data_command(int argc, char** argv);

}  // namespace pipelane
