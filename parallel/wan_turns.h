// The executor's side of temporal WAN sharing (parallel/wan_schedule.h): before a cross-site send
// with a turn, wait until the pipeline before it in the rotation has sent its message; once the
// send has completed, hand the turn to the next one. Turns travel as small tokens on the control
// plane between the ranks of one stage (one site), tagged per link. Nothing here is timed: the
// order comes from the lowered list alone.
//
// Every wait of the executor must call service() while it waits, so completed sends hand their
// turns on even while this rank is blocked elsewhere (otherwise two pipelines could wait on each
// other). finish_iteration() hands on what is left at the end of a step.
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "parallel/control_plane.h"
#include "parallel/wan_schedule.h"
#include "runtime/backend.h"

namespace pipelane {

class WanTurns {
 public:
  // `list` is this rank's lowered list; `world` the control plane over every rank (ranks of a
  // route's rings are its ranks).
  WanTurns(ControlPlane& world, WanRoute route, const std::vector<Instr>& list);
  ~WanTurns();
  WanTurns(const WanTurns&) = delete;
  WanTurns& operator=(const WanTurns&) = delete;

  // Whether any send of the list has a turn (otherwise nothing here ever waits).
  bool active() const { return !slots_.empty(); }
  // True once `send`'s turn has come (at once when it has no turn, or is the iteration's first).
  // Polls; posts the token's receive the first time it is asked.
  bool turn_has_come(const Instr& send);
  // `send` was posted; its completion `done` hands the turn on (see service()).
  void posted(const Instr& send, std::shared_ptr<Event> done);
  // Hands on the turns of the sends that have completed since the last call.
  void service();
  // Blocks until every posted send has completed and handed its turn on (end of a step).
  void finish_iteration();

 private:
  struct Pass;
  int tag_of(int peer_stage) const;
  ControlPlane& world_;
  WanRoute route_;
  std::map<int, int> slots_;  // peer stage -> sends with a turn per iteration
  // The token this rank waits for, per peer stage: its receive, once posted.
  struct Waiting {
    int slot = -1;
    int payload = -1;
    std::unique_ptr<CommRequest> request;
    bool arrived = false;
  };
  std::map<int, Waiting> waiting_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

// An Event that shares another: the slot's pending list and the turns both hold the send's.
class SharedEvent final : public Event {
 public:
  explicit SharedEvent(std::shared_ptr<Event> event) : event_(std::move(event)) {}
  void record(Stream& stream) override { event_->record(stream); }
  bool query() const override { return event_->query(); }
  void synchronize() override { event_->synchronize(); }
  void wait_on(Stream& stream) override { event_->wait_on(stream); }
  double elapsed_ms_since(const Event& earlier) const override { return event_->elapsed_ms_since(earlier); }

 private:
  std::shared_ptr<Event> event_;
};

}  // namespace pipelane
