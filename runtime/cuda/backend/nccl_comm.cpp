#include "runtime/cuda/backend/nccl_comm.h"

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "runtime/cuda/backend/cuda_streams.h"

namespace pipelane::cuda {

namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(r) +
                             (r == ncclSystemError || r == ncclInternalError ? std::string(" (") + ncclGetLastError(nullptr) + ")"
                                                                             : std::string()));
}

class NcclComm final : public DeviceComm {
 public:
  NcclComm(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclComm() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(const void* data, std::size_t bytes, int peer, Stream& stream) override {
    check(ncclSend(data, bytes, ncclChar, peer, comm_, cuda_stream(stream).handle()), "ncclSend");
  }
  void recv(void* data, std::size_t bytes, int peer, Stream& stream) override {
    check(ncclRecv(data, bytes, ncclChar, peer, comm_, cuda_stream(stream).handle()), "ncclRecv");
  }
  void all_reduce_sum(float* data, std::size_t n, Stream& stream) override { reduce(data, n, ncclSum, stream); }
  void all_reduce_max(float* data, std::size_t n, Stream& stream) override { reduce(data, n, ncclMax, stream); }
  void all_gather(const float* in, float* out, std::size_t n, Stream& stream) override {
    check(ncclAllGather(in, out, n, ncclFloat, comm_, cuda_stream(stream).handle()), "ncclAllGather");
  }
  void reduce_scatter_sum(float* data, std::size_t n, Stream& stream) override {
    check(ncclReduceScatter(data, data + static_cast<std::size_t>(rank_) * n, n, ncclFloat, ncclSum, comm_,
                            cuda_stream(stream).handle()),
          "ncclReduceScatter");
  }

 private:
  void reduce(float* data, std::size_t n, ncclRedOp_t op, Stream& stream) {
    if (size_ > 1) check(ncclAllReduce(data, data, n, ncclFloat, op, comm_, cuda_stream(stream).handle()), "ncclAllReduce");
  }
  ncclComm_t comm_;
  int rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<DeviceComm>> create_nccl_comms(const std::vector<NcclCommSpec>& specs, int device) {
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("cudaSetDevice(" + std::to_string(device) + ") failed before creating NCCL communicators");
  }
  std::vector<ncclComm_t> comms(specs.size(), nullptr);
  check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t first_error = ncclSuccess;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ncclResult_t r = ncclCommInitRank(&comms[i], specs[i].size, specs[i].id, specs[i].rank);
    if (r != ncclSuccess && first_error == ncclSuccess) first_error = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  if (first_error != ncclSuccess || end != ncclSuccess) {
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
    check(first_error != ncclSuccess ? first_error : end, "ncclCommInitRank (in one group)");
  }
  std::vector<std::unique_ptr<DeviceComm>> out;
  for (std::size_t i = 0; i < specs.size(); ++i)
    out.push_back(std::make_unique<NcclComm>(comms[i], specs[i].rank, specs[i].size));
  return out;
}

}  // namespace pipelane::cuda
