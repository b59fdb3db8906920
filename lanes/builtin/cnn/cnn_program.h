// One training step of a CNN lane as a fixed list of blocks ("ops"), each a bounded piece of
// work, run in order: load the batch's images, every layer's forward phases, the loss, every
// layer's backward phases (each feature's gradient zeroed before its first writer), the running
// statistics, SGD with momentum. A lane step runs whole ops until its budget is spent, so a
// training step spreads over as many lane steps as it needs and the math is the uncut step's:
// batch norm still sees the whole batch, because its statistics are phases of their own that end
// before anything uses them.
//
// Ops are cut by the budget when the program is built: a phase of R rows of cost c each, plus o per
// block (a GEMM packing its weight), becomes blocks of floor((budget - o) / c) rows, but at least
// one row and at least enough rows that the packing is no more than half the block (o <= rows c:
// otherwise deep layers would pack their weight once per pixel). So a block costs at most the
// budget, one row, or twice its packing. The cuts, and with them every sum's order, are a function
// of the configuration: the same bits on every run and after a resume.
#pragma once
#include <cstdint>
#include <vector>

#include "lanes/builtin/cnn/cnn_network.h"

namespace pipelane::cnn {

enum class OpKind : std::uint8_t { Load, Forward, Loss, ZeroGrad, Backward, Statistics, Sgd };

struct ProgramOp {
  OpKind kind = OpKind::Load;
  CnnLayer* layer = nullptr;    // Forward, Backward, Statistics
  Feature* feature = nullptr;   // ZeroGrad
  CnnParam* param = nullptr;    // Sgd
  int phase = 0;
  std::int64_t r0 = 0, r1 = 0;  // rows of the phase (images, pixels, elements)
  double cost = 0;              // FLOP-equivalents (cnn_cost.h), overhead included
  double overhead = 0;          // the part that does not depend on the rows
};

struct CnnProgram {
  std::vector<ProgramOp> ops;
  std::size_t first_update = 0;  // ops before it can be redone from the step's start
  double total_cost = 0;
  std::vector<double> cost_before;  // [ops.size() + 1]: the cost of the ops before each
  std::size_t scratch_floats = 0;  // each im2col scratch buffer
};

// The largest im2col scratch any block may take (16 MiB), so an unbounded budget does not ask for
// a whole layer's patches at once.
inline constexpr std::size_t kMaxScratchFloats = std::size_t{1} << 22;

// `budget`: FLOP-equivalents per block; `load_cost_per_image`: the data source's.
CnnProgram build_program(CnnNetwork& net, double budget, double load_cost_per_image);

}  // namespace pipelane::cnn
