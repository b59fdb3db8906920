// The CNN lanes' cost model, which cuts a training step into blocks of about one lane step's
// budget. Costs are FLOP-equivalents: a GEMM's 2*M*N*K, and for a host loop kElementCost per
// element it touches: profiled on a 2-core x86 machine, the backend's GEMMs ran at 0.03-0.05 ns per
// flop and the layers' loops at 0.05-0.5 ns per element (max pooling, batch norm, ReLU, im2col),
// about 4 flops' time. Loops that branch on data were made branch-free rather than charged more.
// It only has to keep blocks roughly equal in time: the gap scheduler measures each lane's real
// step cost and fits steps by that.
#pragma once

namespace pipelane::cnn {

inline constexpr double kElementCost = 4.0;
// A GEMM call packs its whole weight operand (reads and writes every element) whatever the rows:
// about 1 ns per element on the same machine, 32 flops' time. With few rows (deep layers, small
// images, linear layers over a batch) this, not the flops, is the block's time.
inline constexpr double kWeightPackCost = 32.0;

}  // namespace pipelane::cnn
