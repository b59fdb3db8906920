// Lets the model's tensor-parallel layers talk through a data plane (MPI today, NCCL on GPUs)
// without model/ knowing either. The collectives run in the order of the stage's compute stream.
#pragma once
#include "model/tensor_parallel.h"
#include "parallel/data_plane.h"

namespace pipelane {

class DataPlaneTensorParallel final : public TensorParallelComm {
 public:
  DataPlaneTensorParallel(DataPlane& plane, Stream& stream) : plane_(plane), stream_(stream) {}
  int rank() const override { return plane_.rank(); }
  int size() const override { return plane_.size(); }
  void all_reduce_sum(float* data, std::size_t n) override { plane_.all_reduce_sum(data, n, stream_); }
  void all_reduce_max(float* data, std::size_t n) override { plane_.all_reduce_max(data, n, stream_); }
  void all_gather(const float* in, float* out, std::size_t n) override { plane_.all_gather(in, out, n, stream_); }
  void reduce_scatter_sum(float* data, std::size_t n) override {
    plane_.reduce_scatter_sum_async(data, n, stream_)->wait_on(stream_);
  }

 private:
  DataPlane& plane_;
  Stream& stream_;
};

}  // namespace pipelane
