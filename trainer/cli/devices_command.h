// `pipelane devices`: every compute backend of this build and the devices each can use here.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

// argv[0] is "devices". 0, or 2 after a bad option.
int devices_command(int argc, char** argv);

}  // namespace pipelane
