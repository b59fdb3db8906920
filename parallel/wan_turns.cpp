#include "parallel/wan_turns.h"

#include <stdexcept>
#include <string>

namespace pipelane {

namespace {
// Control-plane tags of the turn tokens: one per peer stage, apart from the barrier's (71xx).
constexpr int kTurnTagBase = 7300;
}  // namespace

struct WanTurns::Pending {
  DataPlane* plane;
  const void* data;
  std::size_t bytes;
  Instr send;
  Stream* stream;
  std::shared_ptr<Event> posted;  // null while queued
};

struct WanTurns::Pass {
  std::shared_ptr<Event> done;
  TurnHolder to{};
  int tag = 0;
  int payload = 0;  // the slot the next sender may now take
  std::unique_ptr<CommRequest> sent;
};

// Completes when the queued-then-posted send has; polling it services the turns, so a rank
// waiting for its own send to finish still posts and hands on the others.
class WanTurns::SendEvent final : public Event {
 public:
  SendEvent(WanTurns& turns, std::shared_ptr<Pending> pending) : turns_(turns), pending_(std::move(pending)) {}
  void record(Stream&) override { throw std::logic_error("a WAN send's event cannot be re-recorded"); }
  bool query() const override {
    turns_.service();
    return pending_->posted && pending_->posted->query();
  }
  void synchronize() override {
    while (!query()) {
    }
    pending_->posted->synchronize();
  }
  void wait_on(Stream&) override { synchronize(); }
  double elapsed_ms_since(const Event&) const override {
    throw std::logic_error("a WAN send's event carries no timestamp");
  }

 private:
  WanTurns& turns_;
  std::shared_ptr<Pending> pending_;
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

std::unique_ptr<Event> WanTurns::send(DataPlane& plane, const void* data, std::size_t bytes, const Instr& send,
                                      Stream& stream) {
  if (!send.wan.has_turn()) throw std::logic_error("WanTurns::send: " + instr_to_string(send) + " has no turn");
  auto pending = std::make_shared<Pending>(Pending{&plane, data, bytes, send, &stream, nullptr});
  queued_[send.peer_stage].push_back(pending);
  service();
  return std::make_unique<SendEvent>(*this, std::move(pending));
}

bool WanTurns::turn_has_come(const Instr& send) {
  const WanLink* link = route_.link_to(send.peer_stage);
  if (!link) throw std::logic_error("WanTurns: a send with a turn on a link the route does not have");
  const std::optional<TurnHolder> before = turn_before(*link, send.wan);
  if (!before) return true;
  Waiting& w = waiting_[send.peer_stage];
  if (w.slot != send.wan.slot) {  // the first time this send is asked about: post the token's receive
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

void WanTurns::post(Pending& p) {
  p.posted = p.plane->send(p.data, p.bytes, p.send.peer_stage, *p.stream);
  const WanLink* link = route_.link_to(p.send.peer_stage);
  const std::optional<TurnHolder> after = turn_after(*link, p.send.wan, slots_.at(p.send.peer_stage));
  if (!after) return;
  auto pass = std::make_unique<Pass>();
  pass->done = p.posted;
  pass->to = *after;
  pass->tag = tag_of(p.send.peer_stage);
  pass->payload = after->slot;
  passes_.push_back(std::move(pass));
}

void WanTurns::service() {
  for (auto& [peer, queue] : queued_)
    while (!queue.empty() && turn_has_come(queue.front()->send)) {
      post(*queue.front());
      queue.pop_front();
    }
  for (auto it = passes_.begin(); it != passes_.end();) {
    Pass& p = **it;
    if (!p.sent && p.done->query()) p.sent = world_.isend(&p.payload, sizeof p.payload, p.to.rank, p.tag);
    if (p.sent && p.sent->test()) it = passes_.erase(it);
    else ++it;
  }
}

void WanTurns::finish_iteration() {
  const auto anything_queued = [&] {
    for (const auto& [peer, queue] : queued_)
      if (!queue.empty()) return true;
    return false;
  };
  while (anything_queued() || !passes_.empty()) service();
  waiting_.clear();
}

}  // namespace pipelane
