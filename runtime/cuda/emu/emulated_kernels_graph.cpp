// The graph lanes' kernels compiled by the host compiler against the emulator: the very
// translation unit nvcc compiles for the GPU (cuda_kernels_graph.cu).
#include "runtime/cuda/cuda_kernels_graph.cu"
