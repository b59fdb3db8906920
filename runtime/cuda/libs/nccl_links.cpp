#include "runtime/cuda/libs/nccl_links.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace pipelane::cuda {

namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r));
}

}  // namespace

NcclId nccl_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  NcclId out;
  std::memcpy(out.bytes.data(), id.internal, out.bytes.size());
  return out;
}

NcclLinks::NcclLinks(int self, const std::vector<P2PLink>& links, const std::vector<NcclId>& ids)
    : self_(self) {
  if (links.size() != ids.size()) throw std::invalid_argument("NcclLinks: one id per link");
  std::vector<ncclComm_t> comms(links.size(), nullptr);
  // All links at once: initialising them one by one could deadlock against a neighbour that
  // initialises its links in another order.
  check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t first_error = ncclSuccess;
  for (std::size_t i = 0; i < links.size(); ++i) {
    const P2PLink& l = links[i];
    if (l.sender != self && l.receiver != self)
      throw std::invalid_argument("NcclLinks: a link without this rank");
    ncclUniqueId id;
    std::memcpy(id.internal, ids[i].bytes.data(), ids[i].bytes.size());
    const ncclResult_t r = ncclCommInitRank(&comms[i], 2, id, l.sender == self ? 0 : 1);
    if (r != ncclSuccess && first_error == ncclSuccess) first_error = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  if (first_error == ncclSuccess && end == ncclSuccess)
    for (std::size_t i = 0; i < links.size(); ++i) comms_[links[i]] = comms[i];
  else
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
  check(first_error, "ncclCommInitRank");
  check(end, "ncclGroupEnd (communicator creation)");
}

NcclLinks::~NcclLinks() {
  for (auto& [link, comm] : comms_) ncclCommDestroy(comm);
}

void NcclLinks::transfer(const P2POp& op, void* buffer, cudaStream_t stream) const {
  const auto it = comms_.find(link_of(self_, op));
  if (it == comms_.end()) throw std::invalid_argument("NcclLinks: no link for this transfer");
  if (op.kind == P2POp::Kind::Send)
    check(ncclSend(buffer, op.bytes, ncclChar, 1, it->second, stream), "ncclSend");
  else
    check(ncclRecv(buffer, op.bytes, ncclChar, 0, it->second, stream), "ncclRecv");
}

}  // namespace pipelane::cuda
