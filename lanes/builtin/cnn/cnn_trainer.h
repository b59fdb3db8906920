// Runs a CNN's training steps (cnn_program.h) a budget at a time: forward, cross-entropy,
// backward, then SGD with momentum as torch.optim.SGD (dampening 0, no Nesterov, weight decay
// added to the gradient: buf = momentum * buf + (g + wd * p); p -= lr * buf; the first step's
// buf is g, which is what momentum * 0 + g is). Every op goes through the Backend on the lane's
// stream, and the host touches the network's buffers only through its copies: they may be
// device memory. Images are made on the host and copied in.
//
// Progress that survives a restart (save/load): parameters, momenta, running statistics, the step
// count and losses. A checkpoint taken part-way through a step's forward or backward restarts that
// step (activations are not kept; nothing the step changes is touched before its update ops, and
// its images are a function of the step number). One taken during the update ops keeps the
// gradients and batch statistics too and resumes at the next op. Either way the resumed run has
// the bits of the uninterrupted one.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lanes/builtin/cnn/cnn_program.h"
#include "lanes/builtin/state_bytes.h"

namespace pipelane::cnn {

struct SgdSettings {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 1e-4f;
};

// Writes image `position` of the stream (NHWC floats, size x size x 3) and its label, into host
// memory (the trainer copies them into the arena through the backend).
using ImageLoader = std::function<void(std::int64_t position, float* pixels, std::int32_t* label)>;

class CnnTrainer {
 public:
  // The network's buffers must be placed (plan_buffers + allocate) before the first run().
  CnnTrainer(CnnNetwork& net, Backend& backend, Stream& stream, SgdSettings sgd, double block_budget,
             double load_cost_per_image, ImageLoader loader, std::uint64_t seed);
  // Both im2col scratch buffers.
  void plan_buffers(BufferPlan& plan);

  // Runs ops while they fit `budget` (at least one), never past the end of a training step.
  // Returns the images' worth of work done: batch x (cost run / cost of a step).
  double run(double budget);

  std::int64_t steps_done() const { return step_; }
  // Images trained so far: whole steps' batches and the step in progress's share (by cost).
  double images_done() const;
  bool at_step_start() const { return cursor_ == 0; }
  std::size_t cursor() const { return cursor_; }  // the next op of the step in progress
  const std::vector<double>& losses() const { return losses_; }  // one per finished step
  const CnnProgram& program() const { return program_; }

  void save(StateWriter& w) const;
  void load(StateReader& r);  // LaneError on a state that does not fit this network

 private:
  void run_op(const ProgramOp& op);
  void load_images(std::int64_t i0, std::int64_t i1);
  void sgd(CnnParam& p, std::int64_t e0, std::int64_t e1) const;
  // Arena floats to and from a state, through host copies (the arena may be device memory).
  void save_floats(StateWriter& w, const float* arena_floats, std::size_t n) const;
  void load_floats(StateReader& r, float* arena_floats, std::size_t n);

  CnnNetwork& net_;
  Backend& backend_;
  Stream& stream_;
  SgdSettings sgd_;
  ImageLoader loader_;
  std::uint64_t seed_;
  CnnProgram program_;
  float* cols_ = nullptr;
  float* dcols_ = nullptr;
  std::vector<float> staged_pixels_;  // host staging of one load op's images
  std::vector<std::int32_t> staged_labels_;

  std::int64_t step_ = 0;
  std::size_t cursor_ = 0;
  double step_loss_ = 0;  // the step in progress, once its loss op has run
  std::vector<double> losses_;
};

}  // namespace pipelane::cnn
