// NCCL behind the point-to-point plan of plans/nccl_p2p.h: one two-rank communicator per link
// (sender = rank 0, receiver = rank 1), all created in one ncclGroupStart/ncclGroupEnd; each
// transfer is one ncclSend/ncclRecv on its link, on the caller's stream for that link. The
// unique ids come from the links' senders and travel over the MPI control plane (not here).
// Errors throw std::runtime_error naming the call and NCCL's message.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <map>
#include <vector>

#include "runtime/cuda/plans/nccl_p2p.h"

namespace pipelane::cuda {

struct NcclId {
  std::array<char, NCCL_UNIQUE_ID_BYTES> bytes{};
};
NcclId nccl_unique_id();  // needs no device

class NcclLinks {
 public:
  // `ids[i]` is the id of `links[i]`; every link must involve `self`.
  NcclLinks(int self, const std::vector<P2PLink>& links, const std::vector<NcclId>& ids);
  ~NcclLinks();
  NcclLinks(const NcclLinks&) = delete;
  NcclLinks& operator=(const NcclLinks&) = delete;

  // Enqueues `op` (bytes from/to `buffer`) on its link's communicator and `stream`.
  void transfer(const P2POp& op, void* buffer, cudaStream_t stream) const;

 private:
  int self_;
  std::map<P2PLink, ncclComm_t> comms_;
};

}  // namespace pipelane::cuda
