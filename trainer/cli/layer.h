// trainer/cli/ (the command line: main and the subcommands) is a layer of the program (trainer/README.md).
// Every header of the folder includes this guard, so code of a folder that must not know this
// one fails to compile.
#pragma once
#if defined(PIPELANE_LAYER_CHECKPOINT)
#error "trainer/checkpoint/ must not include trainer/cli/ (trainer/README.md: the layers)"
#endif
#if defined(PIPELANE_LAYER_CONFIG)
#error "trainer/config/ must not include trainer/cli/ (trainer/README.md: the layers)"
#endif
#if defined(PIPELANE_LAYER_HF)
#error "trainer/hf/ must not include trainer/cli/ (trainer/README.md: the layers)"
#endif
#if defined(PIPELANE_LAYER_RUN)
#error "trainer/run/ must not include trainer/cli/ (trainer/README.md: the layers)"
#endif
#if defined(PIPELANE_LAYER_REPORT)
#error "trainer/report/ must not include trainer/cli/ (trainer/README.md: the layers)"
#endif
#if defined(PIPELANE_LAYER_SIM)
#error "trainer/sim/ must not include trainer/cli/ (trainer/README.md: the layers)"
#endif
