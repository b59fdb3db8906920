// The nvcc translation unit of the CNN lanes' own kernels (cuda_ops_cnn.h), fp32 only. Its own
// unit beside cuda_kernels.cu, so the GPT-2 kernels' unit is unchanged.
#include "runtime/cuda/cuda_ops_cnn.h"
#include "runtime/cuda/kernels/cnn_batch_norm.cuh"
#include "runtime/cuda/kernels/cnn_classifier.cuh"
#include "runtime/cuda/kernels/cnn_conv.cuh"
#include "runtime/cuda/kernels/cnn_pointwise.cuh"
#include "runtime/cuda/kernels/cnn_pooling.cuh"
