#include "parallel/wan_turns.h"

#include <stdexcept>
#include <string>
#include <thread>

namespace pipelane {

namespace {
// Control-plane tags of the turn tokens: one per peer stage, apart from the barrier's (71xx).
constexpr int kTurnTagBase = 7300;
}  // namespace

// A completed-or-not send whose turn goes to `to` once `done` completes.
struct WanTurns::Pass {
  std::shared_ptr<Event> done;
  TurnHolder to{};
  int tag = 0;
  int payload = 0;  // the slot the receiver's send may now take
  std::unique_ptr<CommRequest> sent;
};

WanTurns::WanTurns(ControlPlane& world, WanRoute route, const std::vector<Instr>& list)
    : world_(world), route_(std::move(route)) {
  for (const WanLink& link : route_.links) {
    const int slots = turn_slots(list, link.peer_stage);
    if (slots > 0) slots_[link.peer_stage] = slots;
  }
}

WanTurns::~WanTurns() = default;

int WanTurns::tag_of(int peer_stage) const { return kTurnTagBase + peer_stage; }

bool WanTurns::turn_has_come(const Instr& send) {
  if (!send.wan.has_turn()) return true;
  const WanLink* link = route_.link_to(send.peer_stage);
  if (!link) throw std::logic_error("WanTurns: a send with a turn on a link the route does not have");
  const std::optional<TurnHolder> before = turn_before(*link, send.wan);
  if (!before) return true;
  Waiting& w = waiting_[send.peer_stage];
  if (w.slot != send.wan.slot) {
    // A new send on this link: the previous token was consumed (its send is posted).
    w = Waiting{};
    w.slot = send.wan.slot;
    w.request = world_.irecv(&w.payload, sizeof w.payload, before->rank, tag_of(send.peer_stage));
  }
  if (!w.arrived && w.request->test()) {
    w.arrived = true;
    if (w.payload != send.wan.slot)
      throw std::logic_error("WAN turn out of order: rank " + std::to_string(world_.rank()) + " waited for slot " +
                             std::to_string(send.wan.slot) + " to stage " + std::to_string(send.peer_stage) +
                             " and got the turn of slot " + std::to_string(w.payload));
  }
  return w.arrived;
}

void WanTurns::posted(const Instr& send, std::shared_ptr<Event> done) {
  if (!send.wan.has_turn()) return;
  const WanLink* link = route_.link_to(send.peer_stage);
  const std::optional<TurnHolder> after = turn_after(*link, send.wan, slots_.at(send.peer_stage));
  if (!after) return;
  auto pass = std::make_unique<Pass>();
  pass->done = std::move(done);
  pass->to = *after;
  pass->tag = tag_of(send.peer_stage);
  pass->payload = after->slot;
  passes_.push_back(std::move(pass));
  service();
}

void WanTurns::service() {
  for (auto it = passes_.begin(); it != passes_.end();) {
    Pass& p = **it;
    if (!p.sent && p.done->query()) p.sent = world_.isend(&p.payload, sizeof p.payload, p.to.rank, p.tag);
    if (p.sent && p.sent->test()) it = passes_.erase(it);
    else ++it;
  }
}

void WanTurns::finish_iteration() {
  for (auto& p : passes_) {
    if (p->sent) continue;
    p->done->synchronize();
    p->sent = world_.isend(&p->payload, sizeof p->payload, p->to.rank, p->tag);
  }
  for (auto& p : passes_) p->sent->wait();
  passes_.clear();
  waiting_.clear();
}

}  // namespace pipelane
