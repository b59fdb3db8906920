#include "runtime/cuda/plans/nccl_p2p.h"

#include <algorithm>

namespace pipelane::cuda {

P2PLink link_of(int self, const P2POp& op) {
  return op.kind == P2POp::Kind::Send ? P2PLink{self, op.peer, op.channel}
                                      : P2PLink{op.peer, self, op.channel};
}

std::vector<P2PLink> pipeline_links(int stage, int pp) {
  if (pp <= 1) return {};
  const int next = (stage + 1) % pp, prev = (stage - 1 + pp) % pp;
  std::vector<P2PLink> links = {
      {stage, next, P2PChannel::Activations},
      {prev, stage, P2PChannel::Activations},
      {stage, prev, P2PChannel::Gradients},
      {next, stage, P2PChannel::Gradients},
  };
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

}  // namespace pipelane::cuda
