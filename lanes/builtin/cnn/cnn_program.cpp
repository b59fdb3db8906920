#include "lanes/builtin/cnn/cnn_program.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "lanes/builtin/cnn/cnn_cost.h"

namespace pipelane::cnn {
namespace {

class ProgramBuilder {
 public:
  ProgramBuilder(CnnProgram& program, double budget) : p_(program), budget_(budget) {}

  // Blocks of a phase of `rows` rows; `scratch_per_row` floats of im2col scratch per row.
  void add(ProgramOp op, std::int64_t rows, double cost_per_row, std::size_t scratch_per_row = 0,
           double cost_per_block = 0) {
    std::int64_t per_block = rows;
    if (cost_per_row > 0) {
      const double fit = std::floor((budget_ - cost_per_block) / cost_per_row);
      const double amortised = std::ceil(cost_per_block / cost_per_row);
      per_block = static_cast<std::int64_t>(std::clamp(std::max(fit, amortised), 1.0, static_cast<double>(rows)));
    }
    if (scratch_per_row > 0)
      per_block = std::max<std::int64_t>(1, std::min<std::int64_t>(per_block, kMaxScratchFloats / scratch_per_row));
    for (std::int64_t r0 = 0; r0 < rows; r0 += per_block) {
      op.r0 = r0;
      op.r1 = std::min(rows, r0 + per_block);
      op.overhead = cost_per_block;
      op.cost = cost_per_block + cost_per_row * static_cast<double>(op.r1 - op.r0);
      p_.ops.push_back(op);
      p_.total_cost += op.cost;
      p_.scratch_floats = std::max(p_.scratch_floats, static_cast<std::size_t>(op.r1 - op.r0) * scratch_per_row);
    }
  }

 private:
  CnnProgram& p_;
  double budget_;
};

}  // namespace

CnnProgram build_program(CnnNetwork& net, double budget, double load_cost_per_image) {
  CnnProgram program;
  ProgramBuilder b(program, budget);
  b.add({OpKind::Load}, net.input->n, load_cost_per_image);
  for (auto& layer : net.layers()) {
    const std::vector<LayerPhase> phases = layer->forward_phases();
    for (std::size_t ph = 0; ph < phases.size(); ++ph) {
      ProgramOp op{OpKind::Forward, layer.get()};
      op.phase = static_cast<int>(ph);
      b.add(op, phases[ph].rows, phases[ph].cost_per_row, layer->scratch_floats_per_row(), phases[ph].cost_per_block);
    }
  }
  const Feature& logits = *net.logits;
  b.add({OpKind::Loss}, 1, kElementCost * static_cast<double>(logits.size()));
  std::set<Feature*> zeroed;
  for (auto it = net.layers().rbegin(); it != net.layers().rend(); ++it) {
    CnnLayer* layer = it->get();
    for (Feature* f : layer->grad_inputs())
      if (f->needs_grad && zeroed.insert(f).second) {
        ProgramOp op{OpKind::ZeroGrad};
        op.feature = f;
        b.add(op, f->rows(), kElementCost * f->c / 4);  // a memset: a quarter of a loop's touch
      }
    const std::vector<LayerPhase> phases = layer->backward_phases();
    for (std::size_t ph = 0; ph < phases.size(); ++ph) {
      ProgramOp op{OpKind::Backward, layer};
      op.phase = static_cast<int>(ph);
      b.add(op, phases[ph].rows, phases[ph].cost_per_row, layer->scratch_floats_per_row(), phases[ph].cost_per_block);
    }
  }
  program.first_update = program.ops.size();
  for (auto& layer : net.layers()) {
    double floats = 0;
    for (const auto& [data, n] : layer->statistics_state()) floats += static_cast<double>(n);
    if (floats > 0) b.add({OpKind::Statistics, layer.get()}, 1, kElementCost * floats);
  }
  for (CnnParam& param : net.params()) {
    ProgramOp op{OpKind::Sgd};
    op.param = &param;
    b.add(op, static_cast<std::int64_t>(param.size()), 6 * kElementCost);  // reads and writes 3 arrays
  }
  program.cost_before.assign(1, 0.0);
  for (const ProgramOp& op : program.ops) program.cost_before.push_back(program.cost_before.back() + op.cost);
  return program;
}

}  // namespace pipelane::cnn
