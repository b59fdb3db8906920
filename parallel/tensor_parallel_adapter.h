// Lets the model's tensor-parallel layers talk through a Communicator (MPI today, NCCL later)
// without model/ knowing either.
#pragma once
#include "model/tensor_parallel.h"
#include "parallel/communicator.h"

namespace pipelane {

class CommunicatorTensorParallel final : public TensorParallelComm {
 public:
  explicit CommunicatorTensorParallel(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_reduce_sum(float* data, std::size_t n) override { comm_.all_reduce_sum(data, n); }
  void all_reduce_max(float* data, std::size_t n) override { comm_.all_reduce_max(data, n); }

 private:
  Communicator& comm_;
};

}  // namespace pipelane
