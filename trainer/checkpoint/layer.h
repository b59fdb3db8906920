// trainer/checkpoint/ (checkpoints on disk and durable files) is a layer of the program (trainer/README.md).
// Every header of the folder includes this guard, so code of a folder that must not know this
// one fails to compile.
#pragma once
#if defined(PIPELANE_LAYER_CONFIG)
#error "trainer/config/ must not include trainer/checkpoint/ (trainer/README.md: the layers)"
#endif
