// `pipelane generate`: text from a checkpoint (any grid) or an exported Hugging Face model through
// the KV-cache decoder, streamed to stdout as it is sampled; deterministic for a seed.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers

namespace pipelane {

int generate_command(int argc, char** argv);

}  // namespace pipelane
