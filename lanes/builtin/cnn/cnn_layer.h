// One layer of a CNN lane's network, written as *phases over rows*: each phase is a loop over
// `rows` independent pieces of work (output pixels, batch rows, parameter elements) that may be cut
// anywhere, and the training step's program (cnn_program.h) runs blocks [r0, r1) of the phases in
// order. A layer whose math needs the whole batch (batch norm's statistics) says so by having one
// phase gather over all rows before the next one uses the result: a step cut into blocks computes
// exactly what the uncut step computes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lanes/builtin/cnn/cnn_tensors.h"
#include "runtime/backend.h"

namespace pipelane::cnn {

struct LayerPhase {
  std::int64_t rows = 0;
  double cost_per_row = 0;    // FLOP-equivalents (cnn_cost.h)
  double cost_per_block = 0;  // what a block costs whatever its rows (a GEMM packing its weight)
};

// What a phase block computes with.
struct CnnCompute {
  Backend& backend;  // every op: the buffers below and the layers' are in its memory
  Stream& stream;
  float* cols = nullptr;   // im2col scratch: max_rows_per_block x K floats of the widest layer
  float* dcols = nullptr;  // and its gradient
  std::int64_t step = 0;   // the training step (dropout masks)
  std::uint64_t seed = 0;
};

class CnnLayer {
 public:
  virtual ~CnnLayer() = default;
  virtual std::string name() const = 0;
  virtual std::vector<LayerPhase> forward_phases() const = 0;
  virtual std::vector<LayerPhase> backward_phases() const = 0;
  // Phase blocks run in order: every block of phase p before any of phase p + 1, r0 ascending.
  virtual void forward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) = 0;
  virtual void backward(int phase, std::int64_t r0, std::int64_t r1, CnnCompute& c) = 0;
  // Features whose gradient backward() adds to (+=); the program zeroes each before its first writer.
  virtual std::vector<Feature*> grad_inputs() const = 0;
  // Floats of each im2col scratch one row of a block needs (convolutions only).
  virtual std::size_t scratch_floats_per_row() const { return 0; }
  // Buffers of its own (batch statistics, pooling's argmax), placed with the network's.
  virtual void plan_buffers(BufferPlan&) {}
  // After backward, before the optimizer: batch norm moves its running statistics (kept apart
  // until then, so a step restarted from its beginning does not move them twice).
  virtual void update_statistics(CnnCompute&) {}
  // The floats update_statistics() reads, saved by a checkpoint taken between backward and the end
  // of the step (cnn_trainer.cpp).
  virtual std::vector<std::pair<float*, std::size_t>> statistics_state() { return {}; }
};

}  // namespace pipelane::cnn
