#include "parallel/sim/job_costs.h"

#include <algorithm>
#include <stdexcept>

#include "parallel/rank_grid.h"

namespace pipelane::sim {

namespace {

// pipelane's tensor-parallel collectives (the all-reduces, sequence parallelism's all-gathers and
// reduce-scatters) move fp32 on every device, bf16 storage included: only the stage-to-stage
// messages are stored and sent in bf16. (The data-parallel gradients are fp32 too, below.)
constexpr double kTpCollectiveElementBytes = 4;

OpTable empty_table(const ScheduleSpec& spec) {
  OpTable t;
  const std::vector<double> chunks(spec.virtual_stages, 0.0);
  t.fwd.assign(spec.pp, chunks);
  t.bwd.assign(spec.pp, chunks);
  t.bwd_weight.assign(spec.pp, chunks);
  t.optimizer.assign(spec.pp, 0.0);
  t.sync.assign(spec.pp, 0.0);
  return t;
}

// The tensor-parallel group of (dp 0, stage): its link (identical for every replica when the
// group fits a node; the tp group is the fastest-varying coordinate).
const LinkSpec& tp_link(const JobSpec& job, const Cluster& cluster, int stage) {
  return cluster.group_link(physical_rank(job, {0, 0, stage}), 1, job.tp);
}

// Seconds of the tensor-parallel all-reduces inside one pass.
double tp_reduce_s(const JobSpec& job, const Cluster& cluster, int stage, int count, double message_bytes,
                   AllReduceAlgorithm algorithm) {
  if (job.tp <= 1 || count == 0) return 0.0;
  return count * all_reduce_s(message_bytes, job.tp, tp_link(job, cluster, stage), algorithm);
}

constexpr double kAdamBytesPerParam = 28;  // read param, grad, m, v (16); write param, m, v (12)
constexpr double kNormBytesPerParam = 4;   // read the gradient

}  // namespace

int physical_rank(const JobSpec& job, RankCoords c) {
  if (!job.replicas_across_sites) return RankGrid({job.tp, job.dp, job.schedule.pp}).rank_of(c);
  return c.tp + job.tp * (c.pp + job.schedule.pp * c.dp);
}

int dp_stride(const JobSpec& job) { return job.replicas_across_sites ? job.tp * job.schedule.pp : job.tp; }

SitePlacement job_placement(const JobSpec& job, const Cluster& cluster) {
  const ParallelDims dims{job.tp, job.dp, job.schedule.pp};
  if (job.world() > cluster.devices())
    throw std::invalid_argument("the job needs " + std::to_string(job.world()) + " devices (tp " +
                                std::to_string(job.tp) + " x dp " + std::to_string(job.dp) + " x pp " +
                                std::to_string(dims.pp) + "), cluster " + cluster.name + " has " +
                                std::to_string(cluster.devices()));
  const RankGrid grid(dims);
  std::vector<int> site_of_rank;
  for (int r = 0; r < dims.world(); ++r) site_of_rank.push_back(cluster.site_of(physical_rank(job, grid.coords(r))));
  std::vector<std::string> names;
  for (const Site& s : cluster.sites) names.push_back(s.name);
  return placement_of(dims, std::move(site_of_rank), names);
}

OpTable device_op_table(const JobSpec& job, const JobShape& shape, const Cluster& cluster,
                        AllReduceAlgorithm algorithm) {
  const ScheduleSpec& spec = job.schedule;
  const DeviceSpec& device = cluster.device;
  const double flops = device.achieved_flops();
  const double message = shape.tp_collective_elements * kTpCollectiveElementBytes;
  OpTable t = empty_table(spec);
  for (int s = 0; s < spec.pp; ++s) {
    for (int c = 0; c < spec.virtual_stages; ++c) {
      const ChunkShape& ch = shape.chunk(spec, s, c);
      const double fwd = ch.fwd_flops / flops + tp_reduce_s(job, cluster, s, ch.tp_all_reduces_fwd, message, algorithm);
      const double b = (ch.bwd_input_flops + ch.rerun_b_flops) / flops +
                       tp_reduce_s(job, cluster, s, ch.tp_all_reduces_bwd + ch.rerun_b_all_reduces, message, algorithm);
      const double w = (ch.bwd_weight_flops + ch.rerun_w_flops) / flops +
                       tp_reduce_s(job, cluster, s, ch.tp_all_reduces_bwd_weight + ch.rerun_w_all_reduces, message,
                                   algorithm);
      t.fwd[s][c] = fwd;
      t.bwd[s][c] = job.split_backward() ? b : b + w;
      t.bwd_weight[s][c] = job.split_backward() ? w : 0.0;
    }
    // The distributed optimizer updates its shard and sums the norm from it.
    const double params = shape.stage_optimizer_params(spec, s);
    t.optimizer[s] = params * kAdamBytesPerParam / device.memory_bandwidth;
    // The gradient norm: read every gradient, then one number all-reduced over the world (tree).
    t.sync[s] = params * kNormBytesPerParam / device.memory_bandwidth +
                all_reduce_s(8, job.world(), cluster.group_link(0, 1, job.world()), AllReduceAlgorithm::Tree);
  }
  return t;
}

bool profile_matches(const JobSpec& job, const MeasuredProfile& profile) {
  const JobSpec& p = profile.job;
  const GptConfig &a = job.model, &b = p.model;
  return profile.instructions && a.layers == b.layers && a.d_model == b.d_model && a.heads == b.heads &&
         a.vocab_size == b.vocab_size && job.seq_len == p.seq_len && job.micro_batch == p.micro_batch &&
         job.tp == p.tp && job.schedule.pp == p.schedule.pp &&
         job.schedule.virtual_stages == p.schedule.virtual_stages &&
         job.split_backward() == p.split_backward() && job.layers_per_stage == p.layers_per_stage &&
         job.recompute == p.recompute && job.optimizer_shards() == p.optimizer_shards();
}

OpTable profile_op_table(const JobSpec& job, const JobShape& shape, const MeasuredProfile& profile,
                         const Cluster& cluster, AllReduceAlgorithm algorithm) {
  const ScheduleSpec& spec = job.schedule;
  if (profile_matches(job, profile)) return *profile.instructions;

  // Seconds per FLOP of each pass kind on the profiled job, and per parameter of its optimizer.
  const JobShape measured = job_shape(profile.job);
  const ScheduleSpec& pspec = profile.job.schedule;
  double fwd_flops = 0, b_flops = 0, w_flops = 0, rerun_b = 0, rerun_w = 0, params = 0;
  for (const ChunkShape& c : measured.virtual_stages) {
    fwd_flops += c.fwd_flops;
    b_flops += c.bwd_input_flops;
    w_flops += c.bwd_weight_flops;
    rerun_b += c.rerun_b_flops;
    rerun_w += c.rerun_w_flops;
  }
  const double chunks = static_cast<double>(measured.virtual_stages.size());
  fwd_flops /= chunks;
  b_flops /= chunks;
  w_flops /= chunks;
  rerun_b /= chunks;
  rerun_w /= chunks;
  if (!(profile.t_f > 0) || !(profile.t_b > 0))
    throw std::invalid_argument(profile.source + ": the profile has no measured forward/backward time");
  const double per_flop_f = profile.t_f / fwd_flops;
  // A split profile times B and W apart; an unsplit one only their sum. A profile measured with
  // recomputation has its reruns (forward work, at the forward's rate) inside them.
  const bool split = profile.job.split_backward() && profile.t_w > 0;
  const double per_flop_b = split ? (profile.t_b - profile.t_w - rerun_b * per_flop_f) / b_flops
                                  : (profile.t_b - (rerun_b + rerun_w) * per_flop_f) / (b_flops + w_flops);
  const double per_flop_w = split ? (profile.t_w - rerun_w * per_flop_f) / w_flops : per_flop_b;
  if (!(per_flop_b > 0) || !(per_flop_w > 0))
    throw std::invalid_argument(profile.source + ": the measured backward is shorter than the forward work its "
                                "recomputation reruns; the profile cannot be scaled");
  double per_param_opt = 0, per_param_sync = 0;
  if (profile.instructions) {
    double opt = 0, sync = 0;
    for (int s = 0; s < pspec.pp; ++s) {
      opt += profile.instructions->optimizer[s];
      sync += profile.instructions->sync[s];
      params += measured.stage_optimizer_params(pspec, s);
    }
    per_param_opt = opt / params;
    per_param_sync = sync / params;
  }

  const double message = shape.tp_collective_elements * kTpCollectiveElementBytes;
  OpTable t = empty_table(spec);
  const OpTable device = device_op_table(job, shape, cluster, algorithm);
  for (int s = 0; s < spec.pp; ++s) {
    for (int c = 0; c < spec.virtual_stages; ++c) {
      const ChunkShape& ch = shape.chunk(spec, s, c);
      const double b = ch.bwd_input_flops * per_flop_b + ch.rerun_b_flops * per_flop_f +
                       tp_reduce_s(job, cluster, s, ch.tp_all_reduces_bwd + ch.rerun_b_all_reduces, message, algorithm);
      const double w = ch.bwd_weight_flops * per_flop_w + ch.rerun_w_flops * per_flop_f +
                       tp_reduce_s(job, cluster, s, ch.tp_all_reduces_bwd_weight + ch.rerun_w_all_reduces, message,
                                   algorithm);
      t.fwd[s][c] = ch.fwd_flops * per_flop_f + tp_reduce_s(job, cluster, s, ch.tp_all_reduces_fwd, message, algorithm);
      t.bwd[s][c] = job.split_backward() ? b : b + w;
      t.bwd_weight[s][c] = job.split_backward() ? w : 0.0;
    }
    const double stage_params = shape.stage_optimizer_params(spec, s);
    t.optimizer[s] = per_param_opt > 0 ? stage_params * per_param_opt : device.optimizer[s];
    t.sync[s] = per_param_opt > 0 ? stage_params * per_param_sync : device.sync[s];
  }
  return t;
}

JobCostModel::JobCostModel(const JobSpec& job, const JobShape& shape, const Cluster& cluster, OpTable ops,
                           AllReduceAlgorithm algorithm)
    : job_(job), ops_(std::move(ops)), algorithm_(algorithm) {
  const ScheduleSpec& spec = job.schedule;
  const int pp = spec.pp;
  if (job.world() > cluster.devices())
    throw std::invalid_argument("the job needs " + std::to_string(job.world()) + " devices (tp " +
                                std::to_string(job.tp) + " x dp " + std::to_string(job.dp) + " x pp " +
                                std::to_string(pp) + "), cluster " + cluster.name + " has " +
                                std::to_string(cluster.devices()));
  message_bytes_ = shape.message_elements * cluster.device.element_bytes();

  // Point-to-point links between neighbouring stages (both directions, and the wrap-around of
  // interleaving), the slowest over replicas; and whether every replica has the same ones.
  const auto note_pair = [&](int from, int to) {
    if (from == to || p2p_.count({from, to})) return;
    const LinkSpec* slowest = nullptr;
    for (int d = 0; d < job.dp; ++d) {
      const LinkSpec& link = cluster.link_between(physical_rank(job, {0, d, from}), physical_rank(job, {0, d, to}));
      if (slowest && link.name != slowest->name) replicas_identical_ = false;
      if (!slowest || link.transfer_s(message_bytes_) > slowest->transfer_s(message_bytes_)) slowest = &link;
    }
    p2p_[{from, to}] = *slowest;
  };
  for (int s = 0; s < pp; ++s) {
    note_pair(s, (s + 1) % pp);
    note_pair((s + 1) % pp, s);
  }
  // Tensor-parallel groups in different kinds of places also make replicas differ.
  for (int s = 0; s < pp; ++s)
    for (int d = 1; d < job.dp; ++d)
      if (cluster.group_link(physical_rank(job, {0, d, s}), 1, job.tp).name !=
          cluster.group_link(physical_rank(job, {0, 0, s}), 1, job.tp).name)
        replicas_identical_ = false;

  // Data-parallel gradient all-reduces: each chunk's gradients (fp32) over the dp group of its
  // stage. The distributed optimizer reduce-scatters them instead (the tails it all-reduces, fewer
  // than dp x 16 floats a segment, are left out) and all-gathers the updated parameters (fp32,
  // pipelane's masters; with sharded masters the bf16 copy, but for the tensors read outside GEMMs)
  // after the optimizer step: charged to OptimizerStep, the gather the next
  // iteration's first forward waits for. On the first stage it is on the critical path. A stage
  // that starts by receiving overlaps it with that wait in the executor: its first activation
  // comes no sooner than the first stage's gather and the forwards of the stages before it (their
  // first chunk's; sends and transfers left out, so this hides no more than the executor does),
  // and only what its own gather takes beyond that is charged.
  dp_reduce_s_.assign(pp, std::vector<double>(spec.virtual_stages, 0.0));
  dp_gather_s_.assign(pp, 0.0);
  for (int s = 0; s < pp && job.dp > 1; ++s) {
    const LinkSpec& link = cluster.group_link(physical_rank(job, {0, 0, s}), dp_stride(job), job.dp);
    for (int c = 0; c < spec.virtual_stages; ++c) {
      const ChunkShape& chunk = shape.chunk(spec, s, c);
      const double bytes = chunk.params * 4;
      if (job.optimizer_shards() > 1) {
        dp_reduce_s_[s][c] = reduce_scatter_s(bytes, job.dp, link);
        const double gathered = job.masters_sharded()
                                    ? 2 * (chunk.params - chunk.fp32_read_params) + 4 * chunk.fp32_read_params
                                    : bytes;
        dp_gather_s_[s] += all_gather_s(gathered, job.dp, link);
      } else {
        dp_reduce_s_[s][c] = all_reduce_s(bytes, job.dp, link, algorithm_);
      }
    }
  }
  double before_first_activation = pp > 0 ? dp_gather_s_[0] : 0.0;
  for (int s = 1; s < pp; ++s) {
    before_first_activation += ops_.fwd[s - 1][0];
    dp_gather_s_[s] = std::max(0.0, dp_gather_s_[s] - before_first_activation);
  }
  dp_free_.assign(pp, 0.0);

  // GradSync: the tied embedding's two copies summed between the first and the last stage, the
  // global gradient norm (one number, over the world: latency-bound), the stages' own work.
  double tied = 0;
  if (pp > 1)
    for (const ChunkShape& c : shape.virtual_stages)
      if (c.range.has_embedding) tied = c.tied_embedding_params * 4;
  tied_s_ = tied > 0 ? all_reduce_s(tied, 2, p2p_link(pp - 1, 0), algorithm_) : 0.0;
  loss_sum_s_ = all_reduce_s(8, job.world(), cluster.group_link(0, 1, job.world()), AllReduceAlgorithm::Tree);
}

const LinkSpec& JobCostModel::p2p_link(int from, int to) const {
  const auto it = p2p_.find({from, to});
  if (it == p2p_.end())
    throw std::logic_error("no link from stage " + std::to_string(from) + " to stage " + std::to_string(to));
  return it->second;
}

const TracedStep* JobCostModel::traced() const {
  return ops_.traced_steps.empty() ? nullptr : &ops_.traced_steps[step_ % ops_.traced_steps.size()];
}

double JobCostModel::traced_or(int stage, const Instr& instr, double mean) const {
  const TracedStep* step = traced();
  if (!step) return mean;
  const auto it = step->seconds.find({stage, instr.op, instr.microbatch, instr.chunk});
  return it == step->seconds.end() ? mean : it->second;
}

double JobCostModel::compute_s(int stage, const Instr& instr) const {
  const auto entry = [&](const std::vector<double>& per_stage) {
    return static_cast<std::size_t>(stage) < per_stage.size() ? per_stage[stage] : 0.0;
  };
  switch (instr.op) {
    case Op::Fwd: return traced_or(stage, instr, ops_.fwd[stage][instr.chunk]);
    case Op::Bwd: return traced_or(stage, instr, ops_.bwd[stage][instr.chunk]);
    case Op::BwdWeight: return traced_or(stage, instr, ops_.bwd_weight[stage][instr.chunk]);
    case Op::OptimizerStep: return traced_or(stage, instr, ops_.optimizer[stage]) + dp_gather_s_[stage];
    case Op::SendFwd:
    case Op::SendBwd: return traced_or(stage, instr, entry(ops_.send));
    case Op::RecvFwd:
    case Op::RecvBwd: return entry(ops_.recv);  // traced receives include their waits
    default: return 0.0;
  }
}

double JobCostModel::sync_s() const {
  double own = 0;  // the slowest stage's own work holds every stage
  for (std::size_t s = 0; s < ops_.sync.size(); ++s)
    own = std::max(own, traced_or(static_cast<int>(s), Instr{Op::GradSync, -1, 0}, ops_.sync[s]));
  // A collective ends when its last rank has joined and the others, waiting, have woken: the tied
  // embedding's sum is one more wake (the norm's is in the stages' measured own work).
  return tied_s_ + (tied_s_ > 0 ? wake_s() : 0.0) + own;
}

double JobCostModel::iteration_end_s() const { return loss_sum_s_ + wake_s(); }

double JobCostModel::wake_s() const {
  if (wake_.empty()) return 0.0;  // not on the profiled machine
  const TracedStep* step = traced();
  return draw_from(step && !step->wake.empty() ? step->wake : wake_, draws_.next());
}

double JobCostModel::wan_wire_s(const LinkSpec& link, const WanSlot& slot) const {
  double bandwidth = slot.stripes * link.bandwidth;
  if (link.capacity > 0)
    bandwidth = std::min(bandwidth, slot.has_turn() ? link.capacity : link.capacity / slot.sharers);
  return message_bytes_ / bandwidth;
}

double JobCostModel::wan_turn_s(const LinkSpec& link, const WanSlot& slot) const {
  return wan_wire_s(link, slot) + (rendezvous(link) ? 2 * link.latency_s : 0.0);
}

void JobCostModel::plan_wan(const std::vector<std::vector<Instr>>& lists) {
  wan_lag_s_ = 0;
  for (std::size_t s = 0; s < lists.size(); ++s)
    for (const Instr& in : lists[s])
      if ((in.op == Op::SendFwd || in.op == Op::SendBwd) && in.wan.has_turn())
        wan_lag_s_ = std::max(wan_lag_s_, (in.wan.sharers - 1) *
                                              wan_turn_s(p2p_link(static_cast<int>(s), in.peer_stage), in.wan));
}

double JobCostModel::arrival_s(int from_stage, int to_stage, const Instr& send, double send_s) {
  if (from_stage == to_stage) return send_s;  // pp = 1 with chunks: a local hand-over
  const LinkSpec& link = p2p_link(from_stage, to_stage);
  // Messages on one link go one after another; the latency overlaps the next message's bytes.
  double& free = link_free_[{from_stage, to_stage}];
  const double start = std::max(send_s, free);
  const double wire = send.wan.crosses() ? wan_wire_s(link, send.wan) : message_bytes_ / link.effective_bandwidth();
  // Under turns the other pipelines' copies follow this one before its next message.
  free = start + (send.wan.has_turn() ? wan_turn_s(link, send.wan) * send.wan.sharers : wire);
  return start + wire + link.latency_s;
}

double JobCostModel::delivered_s(int from_stage, int to_stage, const Instr& send, double arrival,
                                 double recv_posted_s) {
  if (from_stage == to_stage || !send.wan.crosses()) return arrival;
  const LinkSpec& link = p2p_link(from_stage, to_stage);
  if (!rendezvous(link)) return arrival;
  const double round_trip = 2 * link.latency_s;
  return std::max(arrival, recv_posted_s + wan_wire_s(link, send.wan)) + round_trip;
}

double JobCostModel::grad_reduce_done_s(int stage, int chunk, double ready_s) {
  ready_s += wan_lag_s_;  // the all-reduce starts when the last pipeline's gradients are final
  const double cost = dp_reduce_s_[stage][chunk];
  if (cost <= 0) return ready_s;
  const double start = std::max(ready_s, dp_free_[stage]);
  dp_free_[stage] = start + cost;
  return start + cost;
}

void JobCostModel::start_iteration() {
  if (started_) ++step_;
  started_ = true;
  link_free_.clear();
  std::fill(dp_free_.begin(), dp_free_.end(), 0.0);
}

}  // namespace pipelane::sim
