// The CPU backend: OpenMP + OpenBLAS kernels (runtime/cpu/cpu_ops.h), flush-to-zero on.
#pragma once
#include <memory>

#include "runtime/backend.h"

namespace pipelane {

// A CPU backend whose kernels use `threads` OpenMP/OpenBLAS threads (0: all cores). The thread
// count belongs to this instance: each op sets it for its own duration on the calling thread and
// restores the caller's setting, so a second backend (a lane's, lane-bench's) never changes the
// trainer's threads. Creating it turns on flush-to-zero and denormals-are-zero on the calling
// thread and the OpenMP workers: denormals made a reference training run ten times slower.
// `compute` = BF16 emulates bf16 compute (runtime/backend.h): the matmul family's GEMM operands
// rounded to bf16, fp32 sgemm accumulation; the CPU reference for bf16 training. Anything but
// F32 or BF16 is std::invalid_argument.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0, DType compute = DType::F32);

// Sets FTZ/DAZ on the calling thread only (for threads the backend did not create).
void enable_flush_denormals_on_this_thread();
bool flush_denormals_enabled_on_this_thread();

}  // namespace pipelane
