// `pipelane sites`: a cluster file's sites and the links between them, and where a training
// config's grid lands on them (trainer/config/wan_setup.h); --shell for scripts/wan/emulate.sh.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

int sites_command(int argc, char** argv);

}  // namespace pipelane
