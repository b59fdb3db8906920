// The AttentionEngine of the library: cuDNN's backend API (libs/cudnn_graph.h), one execution
// plan per graph key, built on first use.
#pragma once
#include <memory>

#include "runtime/cuda/backend/attention_engine.h"

namespace pipelane::cuda {

// Throws std::runtime_error (cudnnCreate's status) when no usable device is present.
std::unique_ptr<AttentionEngine> make_cudnn_attention_engine();

}  // namespace pipelane::cuda
