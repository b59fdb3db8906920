// The WAN lowering: a pass over one rank's instruction list that marks the transfers crossing
// sites, so that the executor and the simulator read the same plan.
//
// Every cross-site transfer (send and receive) gets `wan.stripes`, the parallel connections its
// message is split over, and `wan.sharers`, the pipelines (tp x dp) of its stage whose transfers to
// the same peer stage take the same link. The splitting itself is the transport's: on MPI over
// TCP, Open MPI stripes a large message over its connections to the peer, one per interface pair
// (splitting it into messages on duplicated communicators does not use more connections, and
// btl_tcp_links splits unevenly: measured in scripts/wan/README.md); the simulator prices it
// from wan.stripes. Under temporal sharing each cross-site send also gets a
// turn and a slot: the sharers send in a fixed rotation - slot k of turn r goes once turn r - 1 has
// sent its slot k (turn 0 once the last turn has sent slot k - 1) - so each message has the link to
// itself, and the pipelines run offset by one message's wire time, one's transfer overlapping the
// others' compute. The sender does not wait for its turn: its message does (queued per link, in
// slot order), so the lists stay as deadlock-free as they are. A turn is handed on as a token
// between the sharers' ranks (same stage, same site) once the send has completed
// (parallel/wan_turns.h). Under concurrent sharing (the naive baseline) the sharers send at once
// and split the link's bandwidth.
//
// With one site nothing crosses and the list comes back unchanged.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "parallel/rank_grid.h"
#include "parallel/schedule.h"
#include "parallel/sites.h"

namespace pipelane {

enum class WanSharing { Concurrent, Temporal };
WanSharing parse_wan_sharing(const std::string& name);  // "concurrent" | "temporal"
const char* wan_sharing_name(WanSharing sharing);

struct WanSettings {
  WanSharing sharing = WanSharing::Temporal;
  int connections = 1;  // parallel connections one cross-site message is split over
};

// The pipelines of one stage that send to one peer stage over the same pair of sites, in turn
// order (ascending world rank), and this rank's turn among them.
struct WanLink {
  int peer_stage = -1;
  std::vector<int> ring;  // world ranks, this rank included
  int turn = 0;
};

// One rank's view of the WAN: its settings and its links that cross sites.
struct WanRoute {
  WanSettings settings;
  std::vector<WanLink> links;
  const WanLink* link_to(int peer_stage) const;  // null when transfers with it stay in a site
};

// `world_rank`'s route under `placement` (which must be the job's).
WanRoute wan_route(const SitePlacement& placement, int world_rank, const WanSettings& settings);

// The lowering (see the top of this file). Throws std::invalid_argument for connections < 1.
std::vector<Instr> lower_for_wan(std::vector<Instr> list, const WanRoute& route);

// The temporal rotation of one link. For a send with a turn: whose send this one waits for
// (world rank, that send's slot; nullopt for the first message of the iteration) and whom it
// hands the turn to once complete (nullopt after the iteration's last message). `slots` is the
// number of sends this stage makes on the link per iteration.
struct TurnHolder {
  int rank;
  int slot;
};
std::optional<TurnHolder> turn_before(const WanLink& link, const WanSlot& send);
std::optional<TurnHolder> turn_after(const WanLink& link, const WanSlot& send, int slots);

// Sends with a turn on the link to `peer_stage` in a lowered list.
int turn_slots(const std::vector<Instr>& list, int peer_stage);

}  // namespace pipelane
