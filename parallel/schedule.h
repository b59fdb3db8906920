// Pipeline schedules as data: one pipeline stage's instruction list, a pure function of
// (kind, pp, virtual_stages, microbatches, stage). See parallel/README.md for the semantics the
// executor, the lane scheduler, telemetry and the simulator rely on.
#pragma once

#include <string>
#include <vector>

namespace pipelane {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZeroBubbleH1 };
enum class Op { RecvFwd, Fwd, SendFwd, RecvBwd, Bwd, BwdWeight, SendBwd, GradSync, OptimizerStep };
enum class WaitKind { None, Warmup, Cooldown, P2PWait, SyncWait };

// A transfer that crosses sites (data centres), attached by the WAN lowering
// (parallel/wan_schedule.h); every other instruction keeps the default: not on a WAN link.
struct WanSlot {
  int stripes = 0;  // 0: not on a WAN link; else the parallel connections the message is split over
  int sharers = 1;  // pipelines whose transfers between these two stages share the link
  // Sends under temporal sharing: this pipeline's turn among the sharers (-1: they send
  // concurrently) and this message's place among the stage's sends on the link this iteration.
  int turn = -1;
  int slot = -1;
  bool crosses() const { return stripes > 0; }
  bool has_turn() const { return turn >= 0 && sharers > 1; }
};

struct Instr {
  Op op;
  int microbatch = -1;  // -1 for GradSync / OptimizerStep
  int chunk = 0;        // model chunk on this stage (interleaved: 0..v-1; else 0)
  WaitKind wait = WaitKind::None;  // RecvFwd/RecvBwd/GradSync: what kind of bubble a wait here is
  // Transfers (SendFwd, RecvFwd, SendBwd, RecvBwd) only, attached by build_schedule's lowering
  // pass: the (stage, chunk) at the other end. -1 elsewhere.
  int peer_stage = -1;
  int peer_chunk = -1;
  WanSlot wan{};
};

struct ScheduleSpec {
  ScheduleKind kind;
  int pp;
  int virtual_stages = 1;
  int microbatches;
};

// Throws std::invalid_argument with one clear line for impossible specs (pp < 1, m < 1,
// interleaved with v < 2 or m % pp != 0, v != 1 for non-interleaved, stage out of range).
//
// Wait kinds (the rule, applied to the finished list): GradSync is SyncWait; a RecvFwd/RecvBwd
// placed before the stage's first Bwd is Warmup (this includes the wait for the first gradient,
// also in GPipe where it comes after the last Fwd); otherwise one placed after the stage's last
// Fwd is Cooldown (the drain); every other receive is P2PWait (steady state). All other
// instructions are WaitKind::None.
std::vector<Instr> build_schedule(const ScheduleSpec& spec, int stage);

// Checks a spec (not a stage); throws std::invalid_argument like build_schedule.
void validate_schedule_spec(const ScheduleSpec& spec);

// "gpipe", "1f1b", "interleaved", "zb-h1" (case-sensitive); throws std::invalid_argument otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
const char* schedule_kind_name(ScheduleKind kind);  // the names parse_schedule_kind accepts
const char* op_name(Op op);                          // "RecvFwd", "Fwd", ...
const char* wait_kind_name(WaitKind kind);           // "None", "Warmup", ...

// Short text form, e.g. "RecvFwd mb=3 chunk=1 wait=Warmup", "GradSync wait=SyncWait".
std::string instr_to_string(const Instr& instr);

// True for RecvFwd, RecvBwd and GradSync: the places a stage can wait (the lane scheduler's gaps).
bool is_wait(Op op);
// True for Fwd, Bwd and BwdWeight: the instructions that compute.
bool is_compute(Op op);
// True for the four point-to-point instructions.
bool is_transfer(Op op);
// Zero-bubble kinds split the backward into Bwd (input gradient) and BwdWeight (weight gradient).
bool backward_is_split(ScheduleKind kind);
// The instruction after which microbatch activations are free again: BwdWeight when the backward
// is split, else Bwd.
Op releases_activations(ScheduleKind kind);

// Most microbatch activations each chunk of this list holds at once (Fwd done, its releasing
// instruction not yet), counted on the list itself: what the executor allocates. At least 1.
std::vector<int> inflight_peak_per_chunk(const std::vector<Instr>& list, const ScheduleSpec& spec);

// Checks the lowered lists of every stage against each other: every send has its receive, and
// the messages of each directed channel (from stage, to stage, direction) are received in the
// order they are sent — the data plane matches messages by issue order, without tags. Throws
// std::logic_error naming the first mismatch.
void check_transfer_order(const ScheduleSpec& spec);

// --- topology of virtual stages (Megatron interleaving: virtual stage of (s, c) is c*pp + s) ---
struct StageChunk {
  int stage;
  int chunk;
  bool operator==(const StageChunk&) const = default;
};
int virtual_stage(const ScheduleSpec& spec, int stage, int chunk);
bool is_first_virtual_stage(const ScheduleSpec& spec, int stage, int chunk);
bool is_last_virtual_stage(const ScheduleSpec& spec, int stage, int chunk);
// Where (stage, chunk)'s SendFwd goes / its RecvFwd comes from. Undefined on the last / first
// virtual stage (throws std::logic_error there).
StageChunk next_virtual_stage(const ScheduleSpec& spec, int stage, int chunk);
StageChunk prev_virtual_stage(const ScheduleSpec& spec, int stage, int chunk);

// Forward passes a stage runs before its first backward (Megatron's warmup count):
// GPipe m; 1F1B and ZB-H1 min(p - r - 1, m); interleaved min((p - r - 1)*2 + (v - 1)*p, m*v)
// (counted in microbatch-chunk forwards).
int warmup_forwards(const ScheduleSpec& spec, int stage);

// Most microbatch(-chunk) activations a stage holds at once (Fwd done, its Bwd - for ZB-H1 its
// BwdWeight - not yet): GPipe m; 1F1B min(p - r, m); interleaved min(warmup + 1, m*v);
// ZB-H1 min(p, m) on every stage (1F1B's peak; later stages hold W inputs longer, see README).
int activation_bound(const ScheduleSpec& spec, int stage);

// Bubble share of the iteration under the standard formulas (parallel/README.md). t_b is the full backward;
// for ZB-H1 the input-gradient part is B = t_b - t_w and W = t_w.
//   GPipe, 1F1B: (p-1)/(m+p-1)   Interleaved: (p-1)/(v*m+p-1)
//   ZB-H1: idle = (p-1)(t_f + B - t_w) = (p-1)(t_f + t_b - 2 t_w) (floored at 0),
//          share = idle / (idle + m (t_f + t_b)).
double theoretical_bubble_fraction(const ScheduleSpec& spec, double t_f = 1, double t_b = 2,
                                   double t_w = 1);

}  // namespace pipelane
