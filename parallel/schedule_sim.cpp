#include "parallel/schedule_sim.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace pipelane {
namespace {

// A message's tag, as seen by its receiver: (direction, receiving stage, microbatch, chunk there).
using Tag = std::tuple<int, int, int, int>;
constexpr int kFwd = 0, kBwd = 1;

Tag send_tag(const ScheduleSpec& spec, int stage, const Instr& instr) {
  if (instr.op == Op::SendFwd) {
    const StageChunk to = next_virtual_stage(spec, stage, instr.chunk);
    return {kFwd, to.stage, instr.microbatch, to.chunk};
  }
  const StageChunk to = prev_virtual_stage(spec, stage, instr.chunk);
  return {kBwd, to.stage, instr.microbatch, to.chunk};
}

Tag recv_tag(int stage, const Instr& instr) {
  return {instr.op == Op::RecvFwd ? kFwd : kBwd, stage, instr.microbatch, instr.chunk};
}

bool list_has_weight_pass(const std::vector<Instr>& list) {
  return std::any_of(list.begin(), list.end(), [](const Instr& i) { return i.op == Op::BwdWeight; });
}

}  // namespace

void validate_sim_costs(const SimCosts& c, ScheduleKind kind) {
  if (c.t_f < 0 || c.t_b < 0 || c.t_w < 0 || c.t_sync < 0 || c.t_opt < 0)
    throw std::invalid_argument("costs must be >= 0");
  if (kind == ScheduleKind::ZeroBubbleH1 && c.t_w > c.t_b)
    throw std::invalid_argument("zb-h1 needs t_w <= t_b (t_b is the full backward, B = t_b - t_w)");
}

double instr_cost(const Instr& instr, ScheduleKind kind, const SimCosts& c) {
  switch (instr.op) {
    case Op::Fwd: return c.t_f;
    case Op::Bwd: return kind == ScheduleKind::ZeroBubbleH1 ? c.t_b - c.t_w : c.t_b;
    case Op::BwdWeight: return c.t_w;
    case Op::GradSync: return c.t_sync;
    case Op::OptimizerStep: return c.t_opt;
    default: return 0;
  }
}

int max_in_flight(const std::vector<Instr>& list) {
  const bool split = list_has_weight_pass(list);
  std::set<std::pair<int, int>> held;
  int most = 0;
  for (const Instr& i : list) {
    if (i.op == Op::Fwd) {
      held.insert({i.microbatch, i.chunk});
      most = std::max(most, static_cast<int>(held.size()));
    } else if ((i.op == Op::Bwd && !split) || i.op == Op::BwdWeight) {
      held.erase({i.microbatch, i.chunk});
    }
  }
  return most;
}

double SimCostModel::arrival_s(int, int, const Instr&, double send_s) { return send_s; }
double SimCostModel::delivered_s(int, int, const Instr&, double arrival, double) { return arrival; }
double SimCostModel::grad_reduce_done_s(int, int, double ready_s) { return ready_s; }

namespace {

// SimCosts as a cost model: unit compute costs, free transfers, no data parallelism.
class UnitCostModel final : public SimCostModel {
 public:
  UnitCostModel(ScheduleKind kind, const SimCosts& costs) : kind_(kind), costs_(costs) {}
  double compute_s(int, const Instr& instr) const override { return instr_cost(instr, kind_, costs_); }
  double sync_s() const override { return costs_.t_sync; }

 private:
  ScheduleKind kind_;
  SimCosts costs_;
};

// Per chunk: the list position of its last gradient-writing instruction (its gradients are final
// there), or -1.
std::vector<int> last_gradient_instr(const std::vector<Instr>& list) {
  const bool split = list_has_weight_pass(list);
  std::vector<int> last;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Instr& in = list[i];
    if (!((in.op == Op::Bwd && !split) || in.op == Op::BwdWeight)) continue;
    if (in.chunk >= static_cast<int>(last.size())) last.resize(in.chunk + 1, -1);
    last[in.chunk] = static_cast<int>(i);
  }
  return last;
}

}  // namespace

SimResult simulate_schedule(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists,
                            const SimCosts& costs) {
  validate_sim_costs(costs, spec.kind);
  UnitCostModel model(spec.kind, costs);
  return simulate_schedule(spec, lists, model);
}

namespace {

// One replay of every stage's list: each stage runs until it blocks (a receive whose message is
// not sent yet, or GradSync), round after round, and the GradSync barrier is passed once every
// unfinished stage stands there.
class ScheduleReplay {
 public:
  ScheduleReplay(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists, SimCostModel& model,
                 SimGapFiller* filler)
      : spec_(spec), lists_(lists), model_(model), filler_(filler), p_(spec.pp), pc_(p_, 0), clock_(p_, 0.0),
        grads_reduced_(p_, 0.0), last_grad_(p_) {
    result_.stages.resize(p_);
    for (int s = 0; s < p_; ++s) last_grad_[s] = last_gradient_instr(lists_[s]);
  }

  SimResult run() {
    bool all_done = false;
    while (!all_done) {
      bool progress = false;
      for (int s = 0; s < p_; ++s) progress = advance(s) || progress;
      // The barrier: every stage unfinished stands at a GradSync.
      bool at_sync = true, any_left = false;
      for (int s = 0; s < p_; ++s) {
        if (done(s)) continue;
        any_left = true;
        if (lists_[s][pc_[s]].op != Op::GradSync) at_sync = false;
      }
      all_done = !any_left;
      if (any_left && at_sync) {
        pass_grad_sync();
        progress = true;
      }
      if (!all_done && !progress) throw deadlock();
    }
    check_every_send_received();
    finish();
    return std::move(result_);
  }

 private:
  struct Sent {
    double arrival;
    int from;
    Instr send;
  };

  bool done(int s) const { return pc_[s] >= lists_[s].size(); }

  void add_idle(int s, double from, double to, int index, WaitKind kind) {
    if (to > from) result_.stages[s].idle.push_back({from, to, index, kind});
  }
  // A wait from `from` until `ready`: lanes (the filler) may run in it, and may run past `ready`.
  double wait_until(int s, int index, WaitKind kind, double from, double ready) {
    if (!(ready > from)) return from;
    ready += model_.wake_s();
    return filler_ ? std::max(ready, filler_->fill(s, index, kind, from, ready)) : ready;
  }

  // Runs stage s's instructions until it blocks or ends; true when it ran any.
  bool advance(int s) {
    bool progress = false;
    while (!done(s)) {
      const Instr& instr = lists_[s][pc_[s]];
      const int index = static_cast<int>(pc_[s]);
      if (instr.op == Op::RecvFwd || instr.op == Op::RecvBwd) {
        if (!receive(s, instr, index)) break;  // blocks until a neighbour sends it
      } else if (instr.op == Op::SendFwd || instr.op == Op::SendBwd) {
        send(s, instr, index);
      } else if (instr.op == Op::GradSync) {
        // A barrier over all stages (the gradient-norm all-reduce spans the model-parallel
        // group): resolved by run() once every stage stands here.
        break;
      } else {
        compute(s, instr, index);
      }
      ++pc_[s];
      progress = true;
    }
    return progress;
  }

  // False when the message is not there yet.
  bool receive(int s, const Instr& instr, int index) {
    const Tag tag = recv_tag(s, instr);
    const auto it = mailbox_.find(tag);
    if (it == mailbox_.end()) {
      if (delivered_.count(tag))
        throw std::invalid_argument("stage " + std::to_string(s) + " receives twice: " + instr_to_string(instr));
      return false;
    }
    // The receive's own work (its copy) follows the wait; like the wait, it is not compute.
    const Sent& sent = it->second;
    const double ready = model_.delivered_s(sent.from, s, sent.send, sent.arrival, clock_[s]);
    const double resume = wait_until(s, index, instr.wait, clock_[s], ready) + model_.compute_s(s, instr);
    add_idle(s, clock_[s], resume, index, instr.wait);
    result_.stages[s].events.push_back({clock_[s], resume, index, instr});
    clock_[s] = resume;
    mailbox_.erase(it);
    delivered_.insert(tag);
    return true;
  }

  void send(int s, const Instr& instr, int index) {
    const Tag tag = send_tag(spec_, s, instr);
    const double posted = clock_[s] + model_.compute_s(s, instr);  // the host's work of posting it
    const double arrival = model_.arrival_s(s, std::get<1>(tag), instr, posted);
    if (!mailbox_.emplace(tag, Sent{arrival, s, instr}).second || delivered_.count(tag))
      throw std::invalid_argument("stage " + std::to_string(s) + " sends twice: " + instr_to_string(instr));
    add_idle(s, clock_[s], posted, index, WaitKind::None);
    result_.stages[s].events.push_back({clock_[s], posted, index, instr});
    clock_[s] = posted;
  }

  void compute(int s, const Instr& instr, int index) {
    StageTimeline& tl = result_.stages[s];
    const double cost = model_.compute_s(s, instr);
    tl.events.push_back({clock_[s], clock_[s] + cost, index, instr});
    clock_[s] += cost;
    tl.busy += cost;
    const std::vector<int>& last = last_grad_[s];
    if (instr.chunk >= 0 && instr.chunk < static_cast<int>(last.size()) && last[instr.chunk] == index)
      grads_reduced_[s] = std::max(grads_reduced_[s], model_.grad_reduce_done_s(s, instr.chunk, clock_[s]));
  }

  // Every unfinished stage stands at GradSync. Each stage's wait for the last one may be filled;
  // the sync then starts when every filled wait and every stage's gradient all-reduces are over.
  void pass_grad_sync() {
    double last_arrival = 0;
    for (int s = 0; s < p_; ++s)
      if (!done(s)) last_arrival = std::max(last_arrival, clock_[s]);
    double sync_start = last_arrival;
    std::vector<double> resume(p_, 0.0);
    for (int s = 0; s < p_; ++s) {
      if (done(s)) continue;
      const Instr& instr = lists_[s][pc_[s]];
      resume[s] = wait_until(s, static_cast<int>(pc_[s]), instr.wait, clock_[s], last_arrival);
      sync_start = std::max({sync_start, resume[s], grads_reduced_[s]});
    }
    const double sync = model_.sync_s();
    for (int s = 0; s < p_; ++s) {
      if (done(s)) continue;
      const Instr& instr = lists_[s][pc_[s]];
      const int index = static_cast<int>(pc_[s]);
      add_idle(s, clock_[s], sync_start, index, instr.wait);
      result_.stages[s].events.push_back({clock_[s], sync_start + sync, index, instr});
      clock_[s] = sync_start + sync;
      result_.stages[s].busy += sync;
      ++pc_[s];
    }
  }

  ScheduleDeadlock deadlock() const {
    std::ostringstream msg;
    msg << "schedule " << schedule_kind_name(spec_.kind) << " deadlocks:";
    for (int s = 0; s < p_; ++s) {
      if (done(s)) continue;
      msg << " stage " << s << " stuck at #" << pc_[s] << " " << instr_to_string(lists_[s][pc_[s]]) << ";";
    }
    return ScheduleDeadlock(msg.str());
  }

  void check_every_send_received() const {
    if (mailbox_.empty()) return;
    const auto& [dir, stage, mb, chunk] = mailbox_.begin()->first;
    throw std::invalid_argument(std::string("unmatched send: ") + (dir == kFwd ? "SendFwd" : "SendBwd") +
                                " to stage " + std::to_string(stage) + " mb=" + std::to_string(mb) +
                                " chunk=" + std::to_string(chunk) + " is never received");
  }

  // The makespan, every stage's idle time (a stage that finished early idles until the last one
  // is done: the iteration's end) and the bubble fraction.
  void finish() {
    for (int s = 0; s < p_; ++s) result_.makespan = std::max(result_.makespan, clock_[s]);
    result_.makespan += model_.iteration_end_s();
    double idle_sum = 0;
    for (int s = 0; s < p_; ++s) {
      StageTimeline& tl = result_.stages[s];
      if (!lists_[s].empty())
        add_idle(s, clock_[s], result_.makespan, static_cast<int>(lists_[s].size()) - 1, WaitKind::SyncWait);
      for (const SimIdle& i : tl.idle) {
        tl.idle_total += i.end - i.start;
        tl.idle_by_kind[static_cast<int>(i.kind)] += i.end - i.start;
      }
      idle_sum += tl.idle_total;
      result_.max_in_flight.push_back(max_in_flight(lists_[s]));
    }
    result_.bubble_fraction = result_.makespan > 0 ? idle_sum / (p_ * result_.makespan) : 0.0;
  }

  const ScheduleSpec& spec_;
  const std::vector<std::vector<Instr>>& lists_;
  SimCostModel& model_;
  SimGapFiller* filler_;
  const int p_;
  SimResult result_;
  std::vector<std::size_t> pc_;
  std::vector<double> clock_;
  std::vector<double> grads_reduced_;  // when each stage's data-parallel all-reduces are done
  std::vector<std::vector<int>> last_grad_;
  std::map<Tag, Sent> mailbox_;  // sent, not yet received
  std::set<Tag> delivered_;
};

}  // namespace

SimResult simulate_schedule(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists,
                            SimCostModel& model, SimGapFiller* filler) {
  validate_schedule_spec(spec);
  if (static_cast<int>(lists.size()) != spec.pp)
    throw std::invalid_argument("simulate_schedule: " + std::to_string(lists.size()) +
                                " instruction lists for pp=" + std::to_string(spec.pp));
  return ScheduleReplay(spec, lists, model, filler).run();
}

SimResult simulate_schedule(const ScheduleSpec& spec, const SimCosts& costs) {
  std::vector<std::vector<Instr>> lists;
  for (int s = 0; s < spec.pp; ++s) lists.push_back(build_schedule(spec, s));
  return simulate_schedule(spec, lists, costs);
}

}  // namespace pipelane
