#include "parallel/schedule.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pipelane {
namespace {

std::string spec_text(const ScheduleSpec& spec) {
  return std::string("schedule ") + schedule_kind_name(spec.kind) + " (pp=" + std::to_string(spec.pp) +
         ", virtual-stages=" + std::to_string(spec.virtual_stages) +
         ", microbatches=" + std::to_string(spec.microbatches) + ")";
}

// Appends instructions of one stage, adding the receive before / the send after each compute
// instruction where the neighbour exists.
class ListBuilder {
 public:
  ListBuilder(const ScheduleSpec& spec, int stage) : spec_(spec), stage_(stage) {}

  void forward(int mb, int chunk) {
    if (!is_first_virtual_stage(spec_, stage_, chunk)) out_.push_back({Op::RecvFwd, mb, chunk});
    out_.push_back({Op::Fwd, mb, chunk});
    if (!is_last_virtual_stage(spec_, stage_, chunk)) out_.push_back({Op::SendFwd, mb, chunk});
  }
  void backward(int mb, int chunk) {
    if (!is_last_virtual_stage(spec_, stage_, chunk)) out_.push_back({Op::RecvBwd, mb, chunk});
    out_.push_back({Op::Bwd, mb, chunk});
    if (!is_first_virtual_stage(spec_, stage_, chunk)) out_.push_back({Op::SendBwd, mb, chunk});
  }
  void weight(int mb, int chunk) { out_.push_back({Op::BwdWeight, mb, chunk}); }

  std::vector<Instr> finish() {
    out_.push_back({Op::GradSync, -1, 0, WaitKind::SyncWait});
    out_.push_back({Op::OptimizerStep, -1, 0});
    assign_wait_kinds();
    lower_transfers();
    return std::move(out_);
  }

 private:
  // The rule documented in schedule.h.
  void assign_wait_kinds() {
    std::ptrdiff_t first_bwd = -1, last_fwd = -1;
    for (std::size_t i = 0; i < out_.size(); ++i) {
      if (out_[i].op == Op::Bwd && first_bwd < 0) first_bwd = static_cast<std::ptrdiff_t>(i);
      if (out_[i].op == Op::Fwd) last_fwd = static_cast<std::ptrdiff_t>(i);
    }
    for (std::size_t i = 0; i < out_.size(); ++i) {
      Instr& instr = out_[i];
      if (instr.op != Op::RecvFwd && instr.op != Op::RecvBwd) continue;
      const auto pos = static_cast<std::ptrdiff_t>(i);
      if (pos < first_bwd) instr.wait = WaitKind::Warmup;
      else if (pos > last_fwd) instr.wait = WaitKind::Cooldown;
      else instr.wait = WaitKind::P2PWait;
    }
  }

  // The lowering pass: each transfer learns the (stage, chunk) at its other end, once, here.
  void lower_transfers() {
    for (Instr& in : out_) {
      StageChunk peer{-1, -1};
      if (in.op == Op::SendFwd || in.op == Op::RecvBwd) peer = next_virtual_stage(spec_, stage_, in.chunk);
      if (in.op == Op::RecvFwd || in.op == Op::SendBwd) peer = prev_virtual_stage(spec_, stage_, in.chunk);
      in.peer_stage = peer.stage;
      in.peer_chunk = peer.chunk;
    }
  }

  const ScheduleSpec& spec_;
  int stage_;
  std::vector<Instr> out_;
};

std::vector<Instr> build_gpipe(const ScheduleSpec& spec, int stage) {
  ListBuilder b(spec, stage);
  for (int mb = 0; mb < spec.microbatches; ++mb) b.forward(mb, 0);
  for (int mb = 0; mb < spec.microbatches; ++mb) b.backward(mb, 0);
  return b.finish();
}

// Megatron's forward_backward_pipelining_without_interleaving, with the combined blocking
// send/recv pairs written as separate instructions (sends are buffered, so receiving later than
// Megatron does only removes waits, never adds a cycle).
//
// ZB-H1 keeps 1F1B's order of F and B and adds the weight-gradient passes W: stage r defers its
// W by r backward passes (W_{i-r} follows B_i; the last r+1 W close the list). The first stage
// runs F B W, the last F B F B ... and absorbs the drain with its deferred W, so the gradient of
// every microbatch travels back at B speed. At most min(p, m) microbatches are in flight per stage.
std::vector<Instr> build_one_f_one_b(const ScheduleSpec& spec, int stage, bool split_weight) {
  const int m = spec.microbatches;
  const int warmup = warmup_forwards(spec, stage);
  const int w_lag = split_weight ? stage : 0;
  ListBuilder b(spec, stage);
  for (int mb = 0; mb < warmup; ++mb) b.forward(mb, 0);
  for (int i = 0; i < m; ++i) {
    if (i + warmup < m) b.forward(i + warmup, 0);
    b.backward(i, 0);
    if (split_weight && i - w_lag >= 0) b.weight(i - w_lag, 0);
  }
  if (split_weight)
    for (int mb = std::max(0, m - w_lag); mb < m; ++mb) b.weight(mb, 0);
  return b.finish();
}

// Megatron's forward_backward_pipelining_with_interleaving (microbatch group size = pp).
std::vector<Instr> build_interleaved(const ScheduleSpec& spec, int stage) {
  const int p = spec.pp, v = spec.virtual_stages, m = spec.microbatches;
  const int total = m * v;
  const int warmup = warmup_forwards(spec, stage);
  const auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  const auto microbatch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  ListBuilder b(spec, stage);
  for (int k = 0; k < warmup; ++k) b.forward(microbatch_of(k), chunk_of(k, true));
  for (int k = 0; k < total; ++k) {
    if (k + warmup < total) b.forward(microbatch_of(k + warmup), chunk_of(k + warmup, true));
    b.backward(microbatch_of(k), chunk_of(k, false));
  }
  return b.finish();
}

}  // namespace

void validate_schedule_spec(const ScheduleSpec& spec) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(spec_text(spec) + ": " + why);
  };
  if (spec.pp < 1) fail("pipeline stages must be >= 1");
  if (spec.microbatches < 1) fail("microbatches must be >= 1");
  if (spec.kind == ScheduleKind::Interleaved) {
    if (spec.virtual_stages < 2) fail("interleaved needs virtual-stages >= 2");
    if (spec.microbatches % spec.pp != 0)
      fail("interleaved needs microbatches to be a multiple of pp");
  } else if (spec.virtual_stages != 1) {
    fail(std::string("virtual-stages must be 1 for ") + schedule_kind_name(spec.kind) +
         " (only interleaved uses model chunks)");
  }
}

std::vector<Instr> build_schedule(const ScheduleSpec& spec, int stage) {
  validate_schedule_spec(spec);
  if (stage < 0 || stage >= spec.pp)
    throw std::invalid_argument(spec_text(spec) + ": stage " + std::to_string(stage) +
                                " out of range [0, " + std::to_string(spec.pp) + ")");
  switch (spec.kind) {
    case ScheduleKind::GPipe: return build_gpipe(spec, stage);
    case ScheduleKind::OneFOneB: return build_one_f_one_b(spec, stage, false);
    case ScheduleKind::ZeroBubbleH1: return build_one_f_one_b(spec, stage, true);
    case ScheduleKind::Interleaved: return build_interleaved(spec, stage);
  }
  throw std::invalid_argument("unknown schedule kind");
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "interleaved") return ScheduleKind::Interleaved;
  if (name == "zb-h1") return ScheduleKind::ZeroBubbleH1;
  throw std::invalid_argument("unknown schedule '" + name +
                              "' (expected gpipe, 1f1b, interleaved or zb-h1)");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::RecvFwd: return "RecvFwd";
    case Op::Fwd: return "Fwd";
    case Op::SendFwd: return "SendFwd";
    case Op::RecvBwd: return "RecvBwd";
    case Op::Bwd: return "Bwd";
    case Op::BwdWeight: return "BwdWeight";
    case Op::SendBwd: return "SendBwd";
    case Op::GradSync: return "GradSync";
    case Op::OptimizerStep: return "OptimizerStep";
  }
  return "?";
}

const char* wait_kind_name(WaitKind kind) {
  switch (kind) {
    case WaitKind::None: return "None";
    case WaitKind::Warmup: return "Warmup";
    case WaitKind::Cooldown: return "Cooldown";
    case WaitKind::P2PWait: return "P2PWait";
    case WaitKind::SyncWait: return "SyncWait";
  }
  return "?";
}

bool is_wait(Op op) { return op == Op::RecvFwd || op == Op::RecvBwd || op == Op::GradSync; }

std::string instr_to_string(const Instr& instr) {
  std::string s = op_name(instr.op);
  if (instr.microbatch >= 0) s += " mb=" + std::to_string(instr.microbatch);
  if (instr.microbatch >= 0) s += " chunk=" + std::to_string(instr.chunk);
  if (instr.wait != WaitKind::None) s += std::string(" wait=") + wait_kind_name(instr.wait);
  if (instr.wan.crosses()) {
    s += " wan=" + std::to_string(instr.wan.stripes) + "x";
    if (instr.wan.has_turn())
      s += " turn=" + std::to_string(instr.wan.turn) + "/" + std::to_string(instr.wan.sharers) +
           " slot=" + std::to_string(instr.wan.slot);
  }
  return s;
}

int virtual_stage(const ScheduleSpec& spec, int stage, int chunk) { return chunk * spec.pp + stage; }

bool is_first_virtual_stage(const ScheduleSpec& spec, int stage, int chunk) {
  return virtual_stage(spec, stage, chunk) == 0;
}

bool is_last_virtual_stage(const ScheduleSpec& spec, int stage, int chunk) {
  return virtual_stage(spec, stage, chunk) == spec.pp * spec.virtual_stages - 1;
}

StageChunk next_virtual_stage(const ScheduleSpec& spec, int stage, int chunk) {
  if (is_last_virtual_stage(spec, stage, chunk))
    throw std::logic_error("next_virtual_stage: the last virtual stage has no successor");
  const int k = virtual_stage(spec, stage, chunk) + 1;
  return {k % spec.pp, k / spec.pp};
}

StageChunk prev_virtual_stage(const ScheduleSpec& spec, int stage, int chunk) {
  if (is_first_virtual_stage(spec, stage, chunk))
    throw std::logic_error("prev_virtual_stage: the first virtual stage has no predecessor");
  const int k = virtual_stage(spec, stage, chunk) - 1;
  return {k % spec.pp, k / spec.pp};
}

int warmup_forwards(const ScheduleSpec& spec, int stage) {
  const int p = spec.pp, m = spec.microbatches, v = spec.virtual_stages;
  switch (spec.kind) {
    case ScheduleKind::GPipe: return m;
    case ScheduleKind::OneFOneB:
    case ScheduleKind::ZeroBubbleH1: return std::min(p - stage - 1, m);
    case ScheduleKind::Interleaved: return std::min((p - stage - 1) * 2 + (v - 1) * p, m * v);
  }
  return 0;
}

int activation_bound(const ScheduleSpec& spec, int stage) {
  const int p = spec.pp, m = spec.microbatches, v = spec.virtual_stages;
  switch (spec.kind) {
    case ScheduleKind::GPipe: return m;
    case ScheduleKind::OneFOneB: return std::min(p - stage, m);
    case ScheduleKind::ZeroBubbleH1: return std::min(p, m);
    case ScheduleKind::Interleaved: return std::min(warmup_forwards(spec, stage) + 1, m * v);
  }
  return 0;
}

double theoretical_bubble_fraction(const ScheduleSpec& spec, double t_f, double t_b, double t_w) {
  validate_schedule_spec(spec);
  const double p = spec.pp, m = spec.microbatches, v = spec.virtual_stages;
  switch (spec.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB: return (p - 1) / (m + p - 1);
    case ScheduleKind::Interleaved: return (p - 1) / (v * m + p - 1);
    case ScheduleKind::ZeroBubbleH1: {
      const double idle = std::max(0.0, (p - 1) * (t_f + (t_b - t_w) - t_w));
      const double busy = m * (t_f + t_b);
      return idle + busy > 0 ? idle / (idle + busy) : 0.0;
    }
  }
  return 0;
}

bool is_compute(Op op) { return op == Op::Fwd || op == Op::Bwd || op == Op::BwdWeight; }

bool is_transfer(Op op) {
  return op == Op::SendFwd || op == Op::RecvFwd || op == Op::SendBwd || op == Op::RecvBwd;
}

bool backward_is_split(ScheduleKind kind) { return kind == ScheduleKind::ZeroBubbleH1; }

Op releases_activations(ScheduleKind kind) {
  return backward_is_split(kind) ? Op::BwdWeight : Op::Bwd;
}

std::vector<int> inflight_peak_per_chunk(const std::vector<Instr>& list, const ScheduleSpec& spec) {
  std::vector<int> inflight(spec.virtual_stages, 0), peak(spec.virtual_stages, 1);
  const Op release = releases_activations(spec.kind);
  for (const Instr& in : list) {
    if (in.op == Op::Fwd) peak[in.chunk] = std::max(peak[in.chunk], ++inflight[in.chunk]);
    if (in.op == release) --inflight[in.chunk];
  }
  return peak;
}

void check_transfer_order(const ScheduleSpec& spec) {
  // channel (from, to, backward?) -> the (microbatch, chunk at the receiver) sequence
  struct Message {
    int microbatch, receiver_chunk;
    bool operator==(const Message&) const = default;
  };
  std::vector<std::vector<Message>> sent(2 * spec.pp * spec.pp), received(2 * spec.pp * spec.pp);
  const auto channel = [&](int from, int to, bool backward) {
    return (backward ? spec.pp * spec.pp : 0) + from * spec.pp + to;
  };
  for (int stage = 0; stage < spec.pp; ++stage)
    for (const Instr& in : build_schedule(spec, stage)) {
      if (!is_transfer(in.op)) continue;
      const bool backward = in.op == Op::SendBwd || in.op == Op::RecvBwd;
      if (in.op == Op::SendFwd || in.op == Op::SendBwd)
        sent[channel(stage, in.peer_stage, backward)].push_back({in.microbatch, in.peer_chunk});
      else
        received[channel(in.peer_stage, stage, backward)].push_back({in.microbatch, in.chunk});
    }
  for (int c = 0; c < static_cast<int>(sent.size()); ++c) {
    if (sent[c] == received[c]) continue;
    const int rest = c % (spec.pp * spec.pp);
    throw std::logic_error(spec_text(spec) + ": the " + (c >= spec.pp * spec.pp ? "backward" : "forward") +
                           " messages from stage " + std::to_string(rest / spec.pp) + " to stage " +
                           std::to_string(rest % spec.pp) + " are received in another order than sent");
  }
}

}  // namespace pipelane
