// The graph lanes' own kernels (issue 24): Backend::bfs_step and Backend::graphsgd_step
// (runtime/backend.h has their semantics), as launchers with the stream last, fp32. No float
// atomics: BFS's counts are integer sums (the same in any order), SGD is serial by definition.
// Definitions: kernels/bfs.cuh, kernels/graphsgd.cuh; instantiated in cuda_kernels_graph.cu (nvcc)
// and emu/emulated_kernels_graph.cpp (the emulator).
#pragma once
#include <driver_types.h>

#include "runtime/backend.h"

namespace pipelane::cuda {

// One slice of a pull BFS pass: one thread per vertex of [v_begin, v_end) (in-edges read in CSR
// order up to the first parent), the block's counts added to the state by one integer atomic
// each; on the pass's last slice one thread ends the pass (runtime/graph_step_finish.h).
void bfs_step(const BfsStep& step, cudaStream_t stream);

// One slice of Gardenia's SGD, serially: one warp walks the slice's edges in order, the latent
// dimensions across its lanes (k = lane, lane + 32, ...), the dot product a fixed butterfly
// (warp_sum). A serial kernel on purpose (the issue forbids order-dependent results; Gardenia's
// GPU SGD is Hogwild, racy); a caller bounds its time by the slice's edges.
void graphsgd_step(const GraphSgdStep& step, cudaStream_t stream);

}  // namespace pipelane::cuda
