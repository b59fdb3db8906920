// How a rank's pipeline transfers become NCCL calls.
//
// NCCL has no tags: it pairs the k-th send from a to b with the k-th receive at b from a, per
// communicator, and a send or receive occupies its stream until the peer's matching call runs
// (rendezvous). The executor's order of transfers (MPI isend/irecv with tags) therefore maps onto
// NCCL as follows:
// - Every transfer travels on a LINK: a two-rank communicator for one sender, one receiver and one
//   channel (activations or gradients), with its own stream on each side. Each transfer is one
//   ncclSend/ncclRecv on its link's stream, after an event on the compute that produced (or
//   before the compute that consumes) its buffer. A link's sender and receiver issue its
//   transfers in the same order (checked for every schedule by the tests), so pairing by order
//   is the pairing MPI's tags gave, and since sends never wait behind receives on another link,
//   progress is that of MPI's non-blocking sends: no deadlock where the MPI executor has none.
// - Why not fewer streams: with one stream per rank, even grouping back-to-back transfers
//   (ncclGroupStart/End, as Megatron batches them) deadlocks the interleaved schedule (pp 2, m 4:
//   both stages send a gradient, alone in its group, before the group that receives one); the
//   tests show it. Why channels: for pp >= 3 the direction already separates activations from
//   gradients (no extra communicator); for pp = 2 both travel between the same two ranks, and a
//   channel each keeps their pairing independent of how a schedule interleaves them (today's
//   schedules would pair correctly on one, the tests check that the split ones do).
// - The links of a rank are created together, inside one ncclGroupStart/ncclGroupEnd (creating
//   several communicators one after another from one thread can deadlock when neighbours create
//   them in different orders), each link's unique id made by its sender and sent to its receiver
//   over the MPI control plane.
//
// Pure data, no NCCL (tests/cuda/test_nccl_p2p.cpp simulates NCCL's semantics on it).
#pragma once
#include <compare>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipelane::cuda {

enum class P2PChannel : std::uint8_t { Activations = 0, Gradients = 1 };

struct P2POp {
  enum class Kind : std::uint8_t { Send, Recv } kind;
  int peer;
  std::size_t bytes;
  P2PChannel channel;
};

// A two-rank communicator carrying one channel from `sender` to `receiver`.
struct P2PLink {
  int sender, receiver;
  P2PChannel channel;
  auto operator<=>(const P2PLink&) const = default;
};

// The link a transfer of rank `self` travels on.
P2PLink link_of(int self, const P2POp& op);

// The links pipeline stage `stage` of `pp` creates (activations to the next stage and from the
// previous one, gradients to the previous and from the next; the ring wraps for interleaved
// schedules), sorted; none when pp == 1.
std::vector<P2PLink> pipeline_links(int stage, int pp);

}  // namespace pipelane::cuda
