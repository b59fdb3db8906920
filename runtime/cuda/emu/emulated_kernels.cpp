// The own kernels compiled by the host compiler against the emulator: the very translation unit
// nvcc compiles for the GPU (cuda_kernels.cu), here for the emulated CUDA backend.
#include "runtime/cuda/cuda_kernels.cu"
