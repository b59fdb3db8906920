// The CNN lanes' cost model, which cuts a training step into blocks of about one lane step's
// budget. Costs are FLOP-equivalents: a GEMM's 2*M*N*K, and for a host loop kElementCost per
// element it touches, because a single-threaded host loop over an element takes about as long as
// the backend's GEMM takes for that many flops (a few GFLOP/s of loop against tens of GEMM on the
// CPUs this runs on). It only has to keep blocks of one step roughly equal in time: the gap
// scheduler measures each lane's real step cost and fits steps by that.
#pragma once

namespace pipelane::cnn {

inline constexpr double kElementCost = 16.0;

}  // namespace pipelane::cnn
