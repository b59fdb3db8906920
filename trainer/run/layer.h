// trainer/run/ (the training run) is a layer of the program (trainer/README.md).
// Every header of the folder includes this guard, so code of a folder that must not know this
// one fails to compile.
#pragma once
#if defined(PIPELANE_LAYER_CHECKPOINT)
#error "trainer/checkpoint/ must not include trainer/run/ (trainer/README.md: the layers)"
#endif
#if defined(PIPELANE_LAYER_CONFIG)
#error "trainer/config/ must not include trainer/run/ (trainer/README.md: the layers)"
#endif
#if defined(PIPELANE_LAYER_HF)
#error "trainer/hf/ must not include trainer/run/ (trainer/README.md: the layers)"
#endif
