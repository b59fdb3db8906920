// The executor's side of temporal WAN sharing (parallel/wan_schedule.h). A cross-site send with a
// turn is posted once the pipeline before it in the rotation has sent its message; until then it
// waits in a queue per link (in slot order) and the stage goes on computing - sends never block,
// so the schedules stay deadlock-free (tests/parallel/test_wan_schedule.cpp runs every schedule
// with every pipeline at once). Once a send has completed, its turn is handed to the next
// pipeline as a small token on the control plane, between ranks of one stage (one site), tagged
// per link. Nothing here is timed: the order comes from the lowered list alone.
//
// service() posts the sends whose turn has come and hands on the turns of completed ones; the
// executor calls it before every instruction and while it waits. finish_iteration() drains what
// is left at the end of a step.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "parallel/control_plane.h"
#include "parallel/data_plane.h"
#include "parallel/wan_schedule.h"
#include "runtime/backend.h"

namespace pipelane {

class WanTurns {
 public:
  // `list` is this rank's lowered list; `world` the control plane over every rank (a route's
  // rings hold its ranks).
  WanTurns(ControlPlane& world, WanRoute route, const std::vector<Instr>& list);
  ~WanTurns();
  WanTurns(const WanTurns&) = delete;
  WanTurns& operator=(const WanTurns&) = delete;

  // Whether any send of the list has a turn (otherwise there is nothing to do here).
  bool active() const { return !slots_.empty(); }
  // Sends `bytes` at `data` for the list's cross-site send `send` (wan.has_turn()) on `plane` as
  // soon as its turn comes - now, or from a later service(). The event completes when the send
  // has; `data` must stay untouched until then.
  std::unique_ptr<Event> send(DataPlane& plane, const void* data, std::size_t bytes, const Instr& send,
                              Stream& stream);
  // Posts queued sends whose turn has come; hands on the turns of completed sends.
  void service();
  // Blocks until every send of the step is posted and complete and every turn handed on.
  void finish_iteration();

 private:
  struct Pending;  // a send of the list, queued or posted
  struct Pass;     // a posted send whose turn goes on once it completes
  class SendEvent;
  bool turn_has_come(const Instr& send);
  void post(Pending& pending);
  int tag_of(int peer_stage) const;

  ControlPlane& world_;
  WanRoute route_;
  std::map<int, int> slots_;  // peer stage -> sends with a turn per iteration
  std::map<int, std::deque<std::shared_ptr<Pending>>> queued_;  // peer stage -> not yet posted
  // The token this rank waits for on each link (peer stage): its receive, once posted.
  struct Waiting {
    int slot = -1;
    int payload = -1;
    std::unique_ptr<CommRequest> request;
    bool arrived = false;
  };
  std::map<int, Waiting> waiting_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace pipelane
