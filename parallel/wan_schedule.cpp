#include "parallel/wan_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace pipelane {

WanSharing parse_wan_sharing(const std::string& name) {
  if (name == "concurrent") return WanSharing::Concurrent;
  if (name == "temporal") return WanSharing::Temporal;
  throw std::invalid_argument("unknown WAN sharing '" + name + "' (expected concurrent or temporal)");
}

const char* wan_sharing_name(WanSharing sharing) {
  return sharing == WanSharing::Concurrent ? "concurrent" : "temporal";
}

const WanLink* WanRoute::link_to(int peer_stage) const {
  for (const WanLink& l : links)
    if (l.peer_stage == peer_stage) return &l;
  return nullptr;
}

WanRoute wan_route(const SitePlacement& placement, int world_rank, const WanSettings& settings) {
  const RankGrid grid(placement.dims);
  const ParallelDims& dims = placement.dims;
  if (world_rank < 0 || world_rank >= dims.world())
    throw std::invalid_argument("wan_route: rank " + std::to_string(world_rank) + " is not in the job");
  WanRoute route;
  route.settings = settings;
  const RankCoords me = grid.coords(world_rank);
  const auto site = [&](RankCoords c) { return placement.site_of_rank[grid.rank_of(c)]; };
  for (int peer = 0; peer < dims.pp; ++peer) {
    if (peer == me.pp) continue;
    RankCoords there = me;
    there.pp = peer;
    if (site(me) == site(there)) continue;
    WanLink link;
    link.peer_stage = peer;
    // The sharers: this stage's pipelines whose transfer to `peer` goes between the same two sites.
    for (int d = 0; d < dims.dp; ++d)
      for (int t = 0; t < dims.tp; ++t) {
        const RankCoords from{t, d, me.pp}, to{t, d, peer};
        if (site(from) == site(me) && site(to) == site(there)) link.ring.push_back(grid.rank_of(from));
      }
    std::sort(link.ring.begin(), link.ring.end());
    link.turn = static_cast<int>(std::find(link.ring.begin(), link.ring.end(), world_rank) - link.ring.begin());
    route.links.push_back(link);
  }
  return route;
}

std::vector<Instr> lower_for_wan(std::vector<Instr> list, const WanRoute& route) {
  if (route.settings.connections < 1)
    throw std::invalid_argument("WAN connections must be >= 1 (got " + std::to_string(route.settings.connections) + ")");
  std::map<int, int> next_slot;  // peer stage -> slots given so far
  for (Instr& in : list) {
    if (!is_transfer(in.op)) continue;
    const WanLink* link = route.link_to(in.peer_stage);
    if (!link) continue;
    in.wan.stripes = route.settings.connections;
    in.wan.sharers = static_cast<int>(link->ring.size());
    const bool send = in.op == Op::SendFwd || in.op == Op::SendBwd;
    if (send && route.settings.sharing == WanSharing::Temporal && in.wan.sharers > 1) {
      in.wan.turn = link->turn;
      in.wan.slot = next_slot[in.peer_stage]++;
    }
  }
  return list;
}

std::optional<TurnHolder> turn_before(const WanLink& link, const WanSlot& send) {
  const int n = static_cast<int>(link.ring.size());
  if (send.turn > 0) return TurnHolder{link.ring[send.turn - 1], send.slot};
  if (send.slot > 0) return TurnHolder{link.ring[n - 1], send.slot - 1};
  return std::nullopt;
}

std::optional<TurnHolder> turn_after(const WanLink& link, const WanSlot& send, int slots) {
  const int n = static_cast<int>(link.ring.size());
  if (send.turn + 1 < n) return TurnHolder{link.ring[send.turn + 1], send.slot};
  if (send.slot + 1 < slots) return TurnHolder{link.ring[0], send.slot + 1};
  return std::nullopt;
}

int turn_slots(const std::vector<Instr>& list, int peer_stage) {
  return static_cast<int>(std::count_if(list.begin(), list.end(), [&](const Instr& in) {
    return (in.op == Op::SendFwd || in.op == Op::SendBwd) && in.peer_stage == peer_stage && in.wan.has_turn();
  }));
}

}  // namespace pipelane
