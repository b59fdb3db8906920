#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>

#include "parallel/compute_after_waits.h"
#include "parallel/sharded_adamw.h"
#include "parallel/tensor_parallel_adapter.h"
#include "parallel/wan_turns.h"

namespace pipelane {

namespace {

using Clock = std::chrono::steady_clock;

// One in-flight microbatch's memory for one chunk.
struct Slot {
  MicrobatchActivations acts;
  // p2p buffers of act_bytes, in the stage's storage dtype (fp32 or bf16)
  void* recv_input = nullptr;   // activation received from upstream
  void* recv_grad = nullptr;    // gradient received from downstream
  void* send_grad = nullptr;    // gradient for upstream
  struct PendingSend {
    const void* reads;  // the buffer the send reads until it completes
    std::unique_ptr<Event> done;
  };
  std::vector<PendingSend> pending;  // sends reading this slot's buffers (settle_before_writing)
  bool busy = false;
};

struct Chunk {
  std::unique_ptr<GptStage> model;
  int virtual_stage = 0;
  float *params = nullptr, *grads = nullptr, *m = nullptr, *v = nullptr;
  // gemm_weights = BF16: the bf16 copy of params that the GEMMs read (GptStage's StageWeights),
  // made again from params before they are next read whenever they may have changed (stale).
  std::uint16_t* params_bf16 = nullptr;
  bool params_bf16_stale = true;
  // The distributed optimizer with bf16 GEMM weights: the fp32 masters are sharded (in `sharded`)
  // and `params` is null; the passes read the bf16 copy and, packed here, the fp32 values of the
  // tensors they read outside GEMMs (model/stage_weights.h). The distributed optimizer makes both
  // from the masters after each update; its bf16 all-gathers still in flight are in
  // params_gathering, settled before the passes next read the weights.
  float* params_fp32 = nullptr;
  Fp32Reads fp32_reads;
  // The weights of a pass that follows another pass of the same step: nothing to settle.
  StageWeights weights() const {
    return masters_sharded() ? StageWeights(params_fp32, params_bf16, &fp32_reads) : StageWeights(params, params_bf16);
  }
  std::unique_ptr<ShardedAdamW> sharded;  // the distributed optimizer; m and v are its shard
  bool masters_sharded() const { return sharded && sharded->masters(); }
  // Its all-gather of the updated parameters, still in flight: waited for before the parameters
  // are next read (the chunk's first forward), so on a stage that starts by receiving it overlaps
  // that wait.
  std::vector<std::unique_ptr<Event>> params_gathering;
  StageScratch scratch;
  std::vector<Slot> slots;
  std::map<int, int> slot_of;  // microbatch -> slot index
  bool first() const { return model->range().has_embedding; }
  bool last() const { return model->range().has_head; }
};

}  // namespace

struct PipelineExecutor::Impl {
  ExecutorOptions opts;
  Topology& topo;
  Backend& backend;
  std::unique_ptr<Stream> compute;  // training compute: the highest priority
  std::unique_ptr<Stream> comm;     // transfers and data-parallel collectives
  int pp, v, stage, m;
  std::size_t act_floats;  // B*T*C, or this rank's B*T*C/tp with sequence parallelism (what a p2p message holds)
  std::size_t act_bytes;   // act_floats values of the storage dtype: 4 bytes each, 2 under bf16 storage
  std::vector<Instr> instrs;
  std::vector<Chunk> chunks;
  std::unique_ptr<Arena> arena;
  DataPlaneTensorParallel tp_comm;
  bool split_backward;  // zero-bubble: backward as B (input gradient) and W (weight gradient)
  GapFiller* filler = nullptr;
  // Data parallelism: a chunk's gradients are final after its last backward of the step; from
  // there they are all-reduced in buckets, in the background, while the stage drains the
  // pipeline (cooldown) or waits at the gradient sync. GradSync then only waits for them.
  static constexpr std::size_t kDpBucketFloats = std::size_t{1} << 20;  // 4 MiB
  std::vector<int> last_grad_instr;  // per chunk: index of its last gradient-writing instruction
  std::vector<std::unique_ptr<Event>> dp_pending;
  Clock::time_point origin;
  UpdateGate update_gate;
  ProgressWatchdog* watchdog = nullptr;
  std::unique_ptr<WanTurns> turns;  // temporal WAN sharing; null when no send has a turn
  RankMemory predicted;             // what the arena is sized for (parallel/memory_model.h)
  bool optimizer_sharded;           // the distributed optimizer: distributed_optimizer and dp > 1
  bool masters_sharded;             // ... with bf16 GEMM weights: its fp32 masters sharded too

  static MemorySpec memory_spec(const ExecutorOptions& o, const Topology& t) {
    MemorySpec m;
    m.model = o.model;
    m.schedule = o.schedule;
    m.tp = t.tp->size();
    m.micro_batch = o.micro_batch;
    m.seq_len = o.seq_len;
    m.layers_per_stage = o.layers_per_stage;
    m.recompute = o.recompute;
    m.sequence_parallel = o.sequence_parallel;
    m.storage = o.storage;
    m.gemm_weights = o.gemm_weights;
    m.optimizer_shards = o.distributed_optimizer ? t.dp->size() : 1;
    m.optimizer_bucket_floats = o.optimizer_bucket_floats;
    return m;
  }

  // World ranks of this rank's group along one grid dimension, others than itself: "1, 3".
  std::string peers(int RankCoords::*dim, int count) const {
    std::string out;
    for (int k = 0; k < count; ++k) {
      RankCoords c = topo.me;
      if (c.*dim == k) continue;
      c.*dim = k;
      out += (out.empty() ? "" : ", ") + std::to_string(topo.grid.rank_of(c));
    }
    return out;
  }
  // Every world rank but this one, for a watchdog that stops in a world collective: "rank 1",
  // "ranks 0, 2, 3" (any of them may be the one that never came).
  std::string every_other_rank() const {
    std::string out;
    int n = 0;
    for (int r = 0; r < topo.world->size(); ++r) {
      if (r == topo.world->rank()) continue;
      out += (out.empty() ? "" : ", ") + std::to_string(r);
      ++n;
    }
    return (n == 1 ? "rank " : "ranks ") + out;
  }
  void note(const std::string& what) {
    if (watchdog) watchdog->beat(what);
  }

  // "step 3 RecvBwd mb=1 chunk=0 from stage 1 (rank 1)": what a watchdog names if it stays here.
  void report(int step_number, const Instr& in) {
    if (!watchdog) return;
    std::string what = "step " + std::to_string(step_number) + " " + instr_to_string(in);
    if (is_transfer(in.op)) {
      RankCoords peer = topo.me;
      peer.pp = in.peer_stage;
      const bool incoming = in.op == Op::RecvFwd || in.op == Op::RecvBwd;
      what += std::string(incoming ? " from" : " to") + " stage " + std::to_string(in.peer_stage) +
              " (rank " + std::to_string(topo.grid.rank_of(peer)) + ")";
    } else if (is_compute(in.op) && topo.grid.dims().tp > 1) {
      what += " (with its tensor-parallel ranks " + peers(&RankCoords::tp, topo.grid.dims().tp) + ")";
    }
    watchdog->beat(std::move(what));
  }

  Impl(const ExecutorOptions& o, Topology& t, Backend& b)
      : opts(o), topo(t), backend(b), compute(b.create_stream(StreamPriority::High)),
        comm(b.create_stream(StreamPriority::Normal)), pp(o.schedule.pp),
        v(o.schedule.virtual_stages), stage(t.me.pp), m(o.schedule.microbatches),
        tp_comm(*t.tp, *compute), split_backward(backward_is_split(o.schedule.kind)),
        optimizer_sharded(o.distributed_optimizer && t.dp->size() > 1),
        masters_sharded(pipelane::masters_sharded(memory_spec(o, t))) {
    if (pp != t.grid.dims().pp)
      throw std::invalid_argument("schedule pp does not match the topology's pp");
    if (o.gemm_weights == DType::BF16 && b.compute_precision() != DType::BF16)
      throw std::invalid_argument("bf16 GEMM weights need a backend of bf16 compute (" + b.name() + " computes in " +
                                  dtype_name(b.compute_precision()) + ")");
    instrs = build_schedule(o.schedule, stage);
    if (o.wan) {
      instrs = lower_for_wan(std::move(instrs), *o.wan);
      auto wan_turns = std::make_unique<WanTurns>(*t.world, *o.wan, instrs);
      if (wan_turns->active()) turns = std::move(wan_turns);
    }
    const auto ranges = split_layers(o.model.layers, pp, v, o.layers_per_stage);
    const int B = o.micro_batch, T = o.seq_len;
    // Sequence parallelism: a stage sends and receives its tp rank's rows only (Megatron-LM's
    // sequence-parallel p2p), 1/tp of the bytes; the next stage's rank of the same tp index
    // holds the same rows.
    act_floats = static_cast<std::size_t>(B) * T * o.model.d_model / (o.sequence_parallel ? t.tp->size() : 1);
    act_bytes = act_floats * dtype_size(o.storage);

    const std::vector<int> peak = inflight_peak_per_chunk(instrs, o.schedule);
    predicted = predict_rank_memory(memory_spec(o, t), stage, t.me.tp, backend);
    for (int c = 0; c < v; ++c) {
      if (predicted.chunks[c].in_flight != peak[c])
        throw std::logic_error("PipelineExecutor: the lowered list holds another number of microbatches than the "
                               "memory model");
      Chunk ch;
      ch.virtual_stage = c * pp + stage;
      ch.model = std::make_unique<GptStage>(o.model, ranges[ch.virtual_stage], backend, *compute,
                                            t.tp->size() > 1 ? &tp_comm : nullptr, o.recompute,
                                            o.sequence_parallel, o.storage);
      ch.slots.resize(peak[c]);
      // A turn that comes during a pass is handed on after the layer, not after the pass: a
      // pass can take longer than a message's turn (scripts/wan/README.md).
      if (turns) ch.model->set_between_layers([this] { turns->service(); });
      chunks.push_back(std::move(ch));
    }
    const std::size_t bytes = static_cast<std::size_t>(predicted.total());
    arena = backend.create_arena("training (stage " + std::to_string(stage) + ")", bytes,
                                 MemoryKind::Device);
    std::vector<float> staging;  // initial parameters are written on the host, then copied in
    for (Chunk& ch : chunks) {
      const std::size_t n = ch.model->layout().total_floats();
      if (!masters_sharded) ch.params = arena->allocate_n<float>(n, "parameters");
      ch.grads = arena->allocate_n<float>(n, "gradients");
      if (o.gemm_weights == DType::BF16) ch.params_bf16 = arena->allocate_n<std::uint16_t>(n, "parameters.bf16");
      if (masters_sharded) {
        ch.fp32_reads = Fp32Reads::of(ch.model->layout());
        ch.params_fp32 = arena->allocate_n<float>(ch.fp32_reads.floats, "parameters.fp32 (read outside GEMMs)");
      }
      if (optimizer_sharded) {
        const ShardedAdamW::PassWeights pass{ch.params_bf16, ch.params_fp32, &ch.fp32_reads};
        ch.sharded = std::make_unique<ShardedAdamW>(ch.model->layout(), *t.dp, o.optimizer_bucket_floats, *arena,
                                                    backend, *compute, masters_sharded ? &pass : nullptr);
        ch.m = ch.sharded->m();
        ch.v = ch.sharded->v();
      } else {
        ch.m = arena->allocate_n<float>(n, "adamw.m");
        ch.v = arena->allocate_n<float>(n, "adamw.v");
      }
      ch.scratch = ch.model->allocate_scratch(*arena, B, T);
      for (Slot& s : ch.slots) {
        s.acts = ch.model->allocate_activations(*arena, B, T, split_backward);
        s.recv_input = arena->allocate(act_bytes, "p2p.recv_input");
        s.recv_grad = arena->allocate(act_bytes, "p2p.recv_grad");
        s.send_grad = arena->allocate(act_bytes, "p2p.send_grad");
      }
      staging.assign(n, 0.f);
      GptStage::init_parameters(ch.model->layout(), staging.data(), o.seed);
      if (masters_sharded)
        ch.sharded->keep_own_parameters(staging.data(), backend, *compute);
      else
        backend.copy(ch.params, staging.data(), n * sizeof(float), *compute);
      compute->synchronize();
    }
    last_grad_instr.assign(v, -1);
    const Op release = releases_activations(o.schedule.kind);
    for (std::size_t i = 0; i < instrs.size(); ++i)
      if (instrs[i].op == release) last_grad_instr[instrs[i].chunk] = static_cast<int>(i);
    topo.world->barrier();
    origin = Clock::now();
  }

  // A parameter all-gather still in flight writes into the arena, which goes before the chunks:
  // finish it first (an MPI request's destructor waits for it).
  ~Impl() {
    for (Chunk& ch : chunks) ch.params_gathering.clear();
  }

  double now() const { return std::chrono::duration<double>(Clock::now() - origin).count(); }

  // Evaluation runs forward only, microbatch by microbatch through the chunks in pipeline order:
  // the peers of a forward message are those of the schedule's SendFwd/RecvFwd.
  int next_stage() const { return (stage + 1) % pp; }
  int prev_stage() const { return (stage - 1 + pp) % pp; }

  Slot& acquire(Chunk& ch, int mb) {
    auto it = ch.slot_of.find(mb);
    if (it != ch.slot_of.end()) return ch.slots[it->second];
    // The slot's last sends may still be draining: the instructions that write what they read
    // settle them (settle_before_writing: forward the output, backward the gradient it sends, a
    // receive its buffer), not the acquire - so the receive of the slot's next
    // microbatch is posted at once. A large MPI message moves only once its receive is posted
    // (rendezvous): settling here made the last stage post each receive only after its previous
    // gradient had crossed, one more transfer on the critical path (over a WAN, 50-90 ms each).
    for (std::size_t i = 0; i < ch.slots.size(); ++i) {
      if (ch.slots[i].busy) continue;
      ch.slots[i].busy = true;
      ch.slot_of[mb] = static_cast<int>(i);
      return ch.slots[i];
    }
    throw std::logic_error("PipelineExecutor: more microbatches in flight than the schedule's bound");
  }
  void release(Chunk& ch, int mb) {
    auto it = ch.slot_of.find(mb);
    ch.slots[it->second].busy = false;
    ch.slot_of.erase(it);
  }

  // A slot's sends must be done before what they read is written again: those reading `buffer`
  // (null: every one) before an instruction writes it. Under WAN turns, this rank's queued sends
  // are posted and completed ones hand their turns on while it waits.
  void settle_before_writing(Slot& slot, const void* buffer) {
    std::vector<Slot::PendingSend> keep;
    for (auto& p : slot.pending) {
      if (buffer && p.reads != buffer) {
        keep.push_back(std::move(p));
        continue;
      }
      if (turns)
        while (!p.done->query()) turns->service();
      p.done->synchronize();
    }
    slot.pending = std::move(keep);
  }

  // Waits for a transfer, handing the wait to the gap filler (lanes) when there is one: every
  // wait reaches it, also when the transfer has already arrived (a deterministic lane plan runs
  // in full whatever the timing). Returns the seconds from the first poll to completion.
  template <typename Done, typename Finish>
  double wait_for(Done&& arrived, Finish&& finish, int iteration, int gap_id, WaitKind kind) {
    const auto t0 = Clock::now();
    // Under WAN turns every wait also posts queued sends and hands on turns.
    const std::function<bool()> done = [&] {
      if (turns) turns->service();
      return arrived();
    };
    if (filler) filler->fill(iteration, gap_id, kind, done);
    else if (done()) return 0.0;
    if (turns)
      while (!done()) {
      }
    finish();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  double wait_for(Event& e, int iteration, int gap_id, WaitKind kind) {
    return wait_for([&e] { return e.query(); }, [&e] { e.synchronize(); }, iteration, gap_id, kind);
  }
  double wait_for(CommRequest& r, int iteration, int gap_id, WaitKind kind) {
    return wait_for([&r] { return r.test(); }, [&r] { r.wait(); }, iteration, gap_id, kind);
  }
  // Receives into `buffer` and makes the compute stream wait for it.
  double receive(DataPlane& plane, void* buffer, const Instr& in, int iteration, int gap_id, WaitKind kind) {
    // The buffer belongs to a slot the compute stream may still be reading (an earlier
    // microbatch's input): the receive waits for the compute issued so far.
    std::unique_ptr<Event> free_to_write = backend.create_event();
    free_to_write->record(*compute);
    free_to_write->wait_on(*comm);
    std::unique_ptr<Event> arrived = plane.recv(buffer, act_bytes, in.peer_stage, *comm);
    const double waited = wait_for(*arrived, iteration, gap_id, kind);
    arrived->wait_on(*compute);
    return waited;
  }
  // Sends `buffer` once the compute stream has produced it.
  std::unique_ptr<Event> send(DataPlane& plane, const void* buffer, int peer) {
    std::unique_ptr<Event> produced = backend.create_event();
    produced->record(*compute);
    produced->wait_on(*comm);
    return plane.send(buffer, act_bytes, peer, *comm);
  }
  // A send of the list: one with a WAN turn is posted when its turn comes (now or later: the
  // stage goes on either way). Striping a cross-site message over several connections is the
  // transport's (Open MPI's btl_tcp_links; scripts/wan/README.md).
  std::unique_ptr<Event> send(DataPlane& plane, const void* buffer, const Instr& in) {
    if (!turns || !in.wan.has_turn()) return send(plane, buffer, in.peer_stage);
    std::unique_ptr<Event> produced = backend.create_event();
    produced->record(*compute);
    produced->wait_on(*comm);
    return turns->send(plane, buffer, act_bytes, in, *comm);
  }

  const std::int32_t* rows(const std::int32_t* base, int mb) const {
    return base ? base + static_cast<std::size_t>(mb) * opts.micro_batch * opts.seq_len : nullptr;
  }

  double sync_gradients() {
    const auto t0 = Clock::now();
    for (Chunk& ch : chunks)
      for (Slot& s : ch.slots) settle_before_writing(s, nullptr);
    // Data parallelism: every replica used loss_scale = 1 / global tokens, so the sum is the mean.
    if (!dp_pending.empty())
      note(std::string("data-parallel gradient ") + (optimizer_sharded ? "reduce-scatter" : "all-reduce") + " with ranks " +
           peers(&RankCoords::dp, topo.grid.dims().dp));
    for (auto& e : dp_pending) e->wait_on(*compute);
    dp_pending.clear();
    // The tied embedding: the first virtual stage's lookup and the last one's head each hold a
    // copy of wte; their gradients are summed so both copies take the same step.
    // An untied head (tie_embeddings = false) has nothing to sum.
    if (pp * v > 1 && opts.model.tie_embeddings) {
      Chunk* emb = nullptr;
      Chunk* head = nullptr;
      for (Chunk& ch : chunks) {
        if (ch.first()) emb = &ch;
        if (ch.last()) head = &ch;
      }
      if (emb && head) {  // both ends on this rank (pp == 1 with several chunks)
        const auto a = tied_gradient_parts(*emb), b = tied_gradient_parts(*head);
        for (std::size_t k = 0; k < a.size(); ++k) {
          backend.add_inplace(a[k].first, b[k].first, a[k].second, *compute);
          backend.copy(b[k].first, a[k].first, a[k].second * sizeof(float), *compute);
        }
      } else if (Chunk* end = emb ? emb : head; end && topo.embedding) {
        RankCoords other = topo.me;
        other.pp = topo.me.pp == 0 ? pp - 1 : 0;
        note("tied-embedding gradient all-reduce with rank " + std::to_string(topo.grid.rank_of(other)));
        for (const auto& [grads, n] : tied_gradient_parts(*end)) topo.embedding->all_reduce_sum(grads, n, *compute);
      }
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // The reduced gradient of the tied embedding this rank holds: the whole tensor, or under the
  // distributed optimizer its spans (alike on both stages: the tensor is a segment of its own).
  std::vector<std::pair<float*, std::size_t>> tied_gradient_parts(Chunk& ch) {
    const ParamEntry& wte = *ch.model->layout().tied_embedding();
    if (!ch.sharded) return {{ch.grads + wte.offset, wte.numel}};
    std::vector<std::pair<float*, std::size_t>> parts;
    for (const ShardedAdamW::Span& s : ch.sharded->spans(wte.offset, wte.offset + wte.numel))
      parts.emplace_back(ch.grads + s.grad_at, s.length);
    return parts;
  }

  double global_grad_norm() {
    double local = 0.0;
    for (const Chunk& ch : chunks) {
      // The head's copy of the tied embedding is the same tensor as the first stage's: count once.
      const bool head_copy = ch.last() && !ch.first() && pp * v > 1 && ch.model->layout().tied_embedding();
      if (ch.sharded) {
        local += ch.sharded->grad_sum_squares_for_global_norm(
            ch.grads, head_copy ? ch.model->layout().tied_embedding() : nullptr, backend, *compute);
        continue;
      }
      // Sharded tensors count on every tp rank, replicated ones on tp rank 0 only.
      double s = grad_sum_squares_for_global_norm(ch.model->layout(), ch.grads, backend, *compute);
      if (head_copy)
        s -= backend.sum_squares(ch.grads + ch.model->layout().wte,
                                 ch.model->layout().tied_embedding()->numel, *compute);
      local += s;
    }
    // Replicas hold identical gradients after the dp sum: reduce over the world, divide by dp.
    // Under the distributed optimizer each dp rank counted its shard: the world's sum is the norm.
    note("gradient-norm all-reduce with every other rank (" + every_other_rank() + ")");
    topo.world->all_reduce_sum(&local, 1);
    return std::sqrt(optimizer_sharded ? local : local / topo.grid.dims().dp);
  }

  // The world's sum of this rank's loss sum: every tensor-parallel rank computes the same loss,
  // so tp rank 0's alone counts.
  double world_loss_sum(double local) {
    double sum = topo.me.tp == 0 ? local : 0.0;
    topo.world->all_reduce_sum(&sum, 1);
    return sum;
  }

  // One step's inputs and what its instructions have produced so far.
  struct StepRun {
    StepRun(const std::int32_t* t, const std::int32_t* g, float scale, float rate, int number)
        : tokens(t), targets(g), loss_scale(scale), lr(rate), step_number(number) {}
    const std::int32_t* tokens;
    const std::int32_t* targets;
    float loss_scale, lr;
    int step_number;
    StepStats stats;
    double loss_sum = 0.0;             // this rank's, over its microbatches so far
    std::optional<double> world_loss;  // the world's sum, once OptimizerStep took it for the gate
  };

  // Runs one instruction of the list (position `gap`); returns the seconds it waited.
  double run_instr(StepRun& run, const Instr& in, int gap) {
    switch (in.op) {
      case Op::RecvFwd: return receive_into(run, in, gap, *topo.pp_forward, &Slot::recv_input);
      case Op::Fwd: forward(run, in); return 0.0;
      case Op::SendFwd: {
        Slot& slot = acquire(chunks[in.chunk], in.microbatch);
        slot.pending.push_back({slot.acts.output(), send(*topo.pp_forward, slot.acts.output(), in)});
        return 0.0;
      }
      case Op::RecvBwd: return receive_into(run, in, gap, *topo.pp_backward, &Slot::recv_grad);
      case Op::Bwd: backward(run, in); return 0.0;
      case Op::BwdWeight: {
        Chunk& ch = chunks[in.chunk];
        Slot& slot = acquire(ch, in.microbatch);
        ch.model->backward_weight(ch.weights(), ch.grads, slot.acts, ch.scratch,
                                  ch.first() ? rows(run.tokens, in.microbatch) : nullptr);
        release(ch, in.microbatch);
        return 0.0;
      }
      case Op::SendBwd: {
        Chunk& ch = chunks[in.chunk];
        Slot& slot = acquire(ch, in.microbatch);
        slot.pending.push_back({slot.send_grad, send(*topo.pp_backward, slot.send_grad, in)});
        // Zero-bubble schedules still owe this microbatch its weight gradient (BwdWeight).
        if (!split_backward) release(ch, in.microbatch);
        return 0.0;
      }
      case Op::GradSync: return grad_sync(run, in, gap);
      case Op::OptimizerStep: optimizer_step(run); return 0.0;
    }
    return 0.0;
  }

  // A receive of the list, into its microbatch slot's `buffer` once the slot's sends reading it
  // are done.
  double receive_into(StepRun& run, const Instr& in, int gap, DataPlane& plane, void* Slot::*buffer) {
    Slot& slot = acquire(chunks[in.chunk], in.microbatch);
    settle_before_writing(slot, slot.*buffer);
    return receive(plane, slot.*buffer, in, run.step_number, gap, in.wait);
  }

  void forward(StepRun& run, const Instr& in) {
    Chunk& ch = chunks[in.chunk];
    const StageWeights weights = weights_for_passes(ch);
    Slot& slot = acquire(ch, in.microbatch);
    settle_before_writing(slot, slot.acts.output());
    run.loss_sum += ch.model->forward(weights, ch.grads, slot.acts, ch.scratch,
                                      ch.first() ? rows(run.tokens, in.microbatch) : nullptr,
                                      ch.first() ? nullptr : slot.recv_input,
                                      ch.last() ? rows(run.targets, in.microbatch) : nullptr, run.loss_scale);
  }

  void backward(StepRun& run, const Instr& in) {
    Chunk& ch = chunks[in.chunk];
    Slot& slot = acquire(ch, in.microbatch);
    settle_before_writing(slot, slot.send_grad);
    const std::int32_t* tok = ch.first() ? rows(run.tokens, in.microbatch) : nullptr;
    const void* grad_out = ch.last() ? nullptr : slot.recv_grad;
    void* grad_in = ch.first() ? nullptr : slot.send_grad;
    if (split_backward) {
      ch.model->backward_input(ch.weights(), ch.grads, slot.acts, ch.scratch, tok, grad_out, grad_in);
    } else {
      ch.model->backward(ch.weights(), ch.grads, slot.acts, ch.scratch, tok, grad_out, grad_in);
      if (ch.first()) release(ch, in.microbatch);
    }
  }

  double grad_sync(StepRun& run, const Instr& in, int gap) {
    // The wait for the slowest stage is a pollable barrier: lanes fill it, the collectives
    // after it find every rank ready, and a rank that never arrives is named by rank 0.
    double waited = 0.0;
    {
      std::unique_ptr<BarrierRequest> all_here = topo.world->ibarrier();
      if (watchdog)
        watchdog->beat("step " + std::to_string(run.step_number) + " GradSync",
                       [&all_here] {
                         const std::string missing = all_here->missing();
                         return missing.empty() ? std::string() : "waiting for rank(s) " + missing;
                       });
      waited = wait_for(*all_here, run.step_number, gap, in.wait);
    }
    waited += sync_gradients();
    run.stats.grad_norm = global_grad_norm();
    return waited;
  }

  void optimizer_step(StepRun& run) {
    if (update_gate) {
      note("step " + std::to_string(run.step_number) + " OptimizerStep: loss all-reduce with every other rank (" +
           every_other_rank() + ")");
      run.world_loss = world_loss_sum(run.loss_sum);
      if (!update_gate(*run.world_loss, run.stats.grad_norm)) {
        run.stats.skipped = true;
        return;
      }
    }
    const float scale = clip_scale(run.stats.grad_norm, opts.grad_clip);
    for (Chunk& ch : chunks) {
      if (ch.masters_sharded()) {
        note("distributed optimizer: parameter all-gather with ranks " + peers(&RankCoords::dp, topo.grid.dims().dp));
        ch.sharded->step_masters(ch.grads, opts.adamw, run.lr, run.step_number, scale, backend, *compute,
                                 ch.params_gathering);
      } else if (ch.sharded) {
        ch.sharded->step(ch.params, ch.grads, opts.adamw, run.lr, run.step_number, scale, backend, *compute,
                         ch.params_gathering);
      } else {
        adamw_step(ch.model->layout(), ch.params, ch.grads, ch.m, ch.v, opts.adamw, run.lr, run.step_number, scale,
                   backend, *compute);
      }
      ch.params_bf16_stale = true;
    }
  }

  // The distributed optimizer's parameters of `ch` are whole again once its all-gather is done.
  void settle_parameters(Chunk& ch) {
    if (ch.params_gathering.empty()) return;
    note("distributed optimizer: parameter all-gather with ranks " + peers(&RankCoords::dp, topo.grid.dims().dp));
    for (auto& e : ch.params_gathering) e->wait_on(*compute);
    ch.params_gathering.clear();
  }
  void settle_parameters() {
    for (Chunk& ch : chunks) settle_parameters(ch);
  }
  // The weights the chunk's passes read: its settled parameters and, with bf16 GEMM weights, their
  // bf16 copy, made again first if the parameters may have changed since it was made.
  StageWeights weights_for_passes(Chunk& ch) {
    settle_parameters(ch);
    if (ch.params_bf16 && ch.params_bf16_stale && !ch.masters_sharded()) {
      backend.cast_to_bf16(ch.params_bf16, ch.params, ch.model->layout().total_floats(), *compute);
      ch.params_bf16_stale = false;
    }
    return ch.weights();
  }

  // Full-layout copies of sharded state (checkpoint_view, parameters_view): `buffers` of each
  // chunk's size in host memory, so a save or a sample needs no device memory beyond a gather
  // buffer, however large the model.
  std::unique_ptr<Arena> full_layout_arena(const std::string& name, int buffers) {
    std::size_t bytes = 0;
    for (const Chunk& ch : chunks)
      bytes += buffers * align_up(ch.model->layout().total_floats() * sizeof(float), Arena::kDefaultAlignment);
    return backend.create_arena(name, bytes, MemoryKind::Host);
  }
  // Without sharded masters (which have a gather buffer each) the moments' gather goes through a
  // device buffer of its own, for the largest chunk (at most 1 MiB), in `scratch`: the caller's,
  // dropped once the gather is done.
  float* moments_gather_buffer(std::unique_ptr<Arena>& scratch) {
    std::size_t floats = 1;
    for (const Chunk& ch : chunks) floats = std::max(floats, ShardedAdamW::gather_floats(ch.sharded->plan()));
    scratch = backend.create_arena("checkpoint gather (stage " + std::to_string(stage) + ")",
                                   align_up(floats * sizeof(float), Arena::kDefaultAlignment), MemoryKind::Device);
    return scratch->allocate_n<float>(floats, "gather buffer");
  }

  // Once `in` wrote its chunk's last gradient of the step: sequence parallelism's norm gradients
  // are summed over tp (before anything reads them), then, with data parallelism, the all-reduce
  // starts in buckets on the communication stream.
  void start_grad_reduce(const Instr& in, int gap) {
    if (!(in.chunk >= 0 && in.chunk < v && last_grad_instr[in.chunk] == gap)) return;
    Chunk& ch = chunks[in.chunk];
    ch.model->reduce_sequence_parallel_gradients(ch.grads);
    if (topo.dp->size() <= 1) return;
    const std::size_t n = ch.model->layout().total_floats();
    std::unique_ptr<Event> produced = backend.create_event();
    produced->record(*compute);
    produced->wait_on(*comm);
    if (ch.sharded) return ch.sharded->start_gradient_reduce(ch.grads, *comm, dp_pending);
    for (std::size_t off = 0; off < n; off += kDpBucketFloats)
      dp_pending.push_back(topo.dp->all_reduce_sum_async(ch.grads + off, std::min(kDpBucketFloats, n - off), *comm));
  }
};

PipelineExecutor::PipelineExecutor(const ExecutorOptions& opts, Topology& topo, Backend& backend)
    : impl_(std::make_unique<Impl>(opts, topo, backend)) {}
PipelineExecutor::~PipelineExecutor() = default;

std::size_t PipelineExecutor::arena_bytes() const { return impl_->arena->capacity(); }
const RankMemory& PipelineExecutor::predicted_memory() const { return impl_->predicted; }
std::size_t PipelineExecutor::arena_high_water() const { return impl_->arena->high_water(); }
void PipelineExecutor::set_gap_filler(GapFiller* filler) { impl_->filler = filler; }
std::chrono::steady_clock::time_point PipelineExecutor::clock_origin() const { return impl_->origin; }

std::vector<ChunkState> PipelineExecutor::chunk_states() {
  impl_->settle_parameters();
  std::vector<ChunkState> out;
  for (Chunk& ch : impl_->chunks) {
    ch.params_bf16_stale = true;  // the caller may write the parameters (a checkpoint's load)
    out.push_back({&ch.model->layout(), ch.virtual_stage, ch.params, ch.grads, ch.sharded ? nullptr : ch.m,
                   ch.sharded ? nullptr : ch.v});
  }
  return out;
}
bool PipelineExecutor::optimizer_sharded() const { return impl_->optimizer_sharded; }
bool PipelineExecutor::masters_sharded() const { return impl_->masters_sharded; }

CheckpointView PipelineExecutor::checkpoint_view(bool gather) {
  Impl& s = *impl_;
  CheckpointView state;
  state.chunks = chunk_states();
  if (!s.optimizer_sharded) return state;
  const int buffers = s.masters_sharded ? 3 : 2;  // the moments, and sharded masters' parameters
  state.arena = s.full_layout_arena(std::string("checkpoint ") + (s.masters_sharded ? "parameters and " : "") +
                                        "moments (stage " + std::to_string(s.stage) + ")",
                                    buffers);
  std::unique_ptr<Arena> gather_arena;
  float* moments_buffer = gather && !s.masters_sharded ? s.moments_gather_buffer(gather_arena) : nullptr;
  for (std::size_t c = 0; c < s.chunks.size(); ++c) {
    ChunkState& view = state.chunks[c];
    Chunk& ch = s.chunks[c];
    const std::size_t n = ch.model->layout().total_floats();
    view.adam_m = state.arena->allocate_n<float>(n, "adamw.m (full layout)");
    view.adam_v = state.arena->allocate_n<float>(n, "adamw.v (full layout)");
    if (s.masters_sharded) view.params = state.arena->allocate_n<float>(n, "parameters (full layout)");
    if (gather) {
      s.note("checkpoint: optimizer-state all-gather with ranks " + s.peers(&RankCoords::dp, s.topo.grid.dims().dp));
      float* buffer = s.masters_sharded ? ch.sharded->gather_buffer() : moments_buffer;
      ch.sharded->gather_moments(view.adam_m, view.adam_v, buffer, s.backend, *s.compute);
      if (s.masters_sharded) ch.sharded->gather_masters(view.params, buffer, s.backend, *s.compute);
    } else {
      // A load may fill only the parameters (init_from): the moments it leaves start at zero.
      std::fill_n(view.adam_m, n, 0.f);
      std::fill_n(view.adam_v, n, 0.f);
    }
  }
  s.compute->synchronize();
  return state;
}

CheckpointView PipelineExecutor::parameters_view() {
  Impl& s = *impl_;
  CheckpointView state;
  state.chunks = chunk_states();
  for (ChunkState& view : state.chunks) view.adam_m = view.adam_v = nullptr;
  if (!s.masters_sharded) return state;
  state.arena = s.full_layout_arena("gathered parameters (stage " + std::to_string(s.stage) + ")", 1);
  s.note("parameter all-gather with ranks " + s.peers(&RankCoords::dp, s.topo.grid.dims().dp));
  for (std::size_t c = 0; c < s.chunks.size(); ++c) {
    Chunk& ch = s.chunks[c];
    state.chunks[c].params = state.arena->allocate_n<float>(ch.model->layout().total_floats(), "parameters");
    ch.sharded->gather_masters(state.chunks[c].params, ch.sharded->gather_buffer(), s.backend, *s.compute);
  }
  s.compute->synchronize();
  return state;
}

void PipelineExecutor::keep_loaded_state(const CheckpointView& loaded) {
  Impl& s = *impl_;
  if (!s.optimizer_sharded) return;
  for (std::size_t c = 0; c < s.chunks.size(); ++c) {
    const ChunkState& view = loaded.chunks.at(c);
    s.chunks[c].sharded->keep_own_moments(view.adam_m, view.adam_v, s.backend, *s.compute);
    if (s.masters_sharded) s.chunks[c].sharded->keep_own_parameters(view.params, s.backend, *s.compute);
  }
  s.compute->synchronize();
}
void PipelineExecutor::set_update_gate(UpdateGate gate) { impl_->update_gate = std::move(gate); }
void PipelineExecutor::set_watchdog(ProgressWatchdog* watchdog) { impl_->watchdog = watchdog; }
Backend& PipelineExecutor::backend() const { return impl_->backend; }
Stream& PipelineExecutor::compute_stream() const { return *impl_->compute; }
const std::vector<Instr>& PipelineExecutor::instructions() const { return impl_->instrs; }
double PipelineExecutor::now_s() const { return impl_->now(); }

StepStats PipelineExecutor::step(const std::int32_t* tokens, const std::int32_t* targets,
                                 float loss_scale, float lr, int step_number) {
  Impl& s = *impl_;
  Impl::StepRun run(tokens, targets, loss_scale, lr, step_number);
  run.stats.start_s = s.now();
  for (Chunk& ch : s.chunks)
    s.backend.memset_zero(ch.grads, ch.model->layout().total_floats() * sizeof(float), *s.compute);
  for (std::size_t index = 0; index < s.instrs.size(); ++index) {
    const Instr& in = s.instrs[index];
    const int gap = static_cast<int>(index);
    s.report(step_number, in);
    if (s.turns) s.turns->service();
    InstrRecord rec{in, s.now(), 0, 0};
    if (is_transfer(in.op)) rec.bytes = s.act_bytes;
    const double cpu_start = s.filler ? process_cpu_seconds() : 0.0;
    rec.wait_s = s.run_instr(run, in, gap);
    s.start_grad_reduce(in, gap);
    rec.end_s = s.now();
    if (s.filler) rec.cpu_s = process_cpu_seconds() - cpu_start;
    run.stats.records.push_back(rec);
  }
  if (s.turns) s.turns->finish_iteration();
  // OptimizerStep ends every list, so the sum the update gate was given is the step's: summed
  // once, not twice.
  run.stats.loss_sum = run.world_loss ? *run.world_loss : s.world_loss_sum(run.loss_sum);
  if (s.filler) {
    s.filler->training_after_gaps(step_number, compute_after_waits(run.stats.records));
    s.filler->end_iteration(step_number);
  }
  run.stats.end_s = s.now();
  return std::move(run.stats);
}

double PipelineExecutor::evaluate_sum(const std::int32_t* tokens, const std::int32_t* targets,
                                      int batches) {
  Impl& s = *impl_;
  s.settle_parameters();
  double loss_sum = 0.0;
  // Forward only, microbatch by microbatch through every chunk in pipeline order.
  for (int mb = 0; mb < batches; ++mb) {
    for (int c = 0; c < s.v; ++c) {
      Chunk& ch = s.chunks[c];
      Slot& slot = ch.slots[0];
      if (s.watchdog)
        s.watchdog->beat("evaluation microbatch " + std::to_string(mb) + " chunk " + std::to_string(c) +
                         (ch.first() ? "" : " (waiting for stage " + std::to_string(s.prev_stage()) + ")"));
      s.settle_before_writing(slot, nullptr);
      if (!ch.first()) {
        std::unique_ptr<Event> arrived =
            s.topo.pp_forward->recv(slot.recv_input, s.act_bytes, s.prev_stage(), *s.comm);
        arrived->synchronize();
        arrived->wait_on(*s.compute);
      }
      loss_sum += ch.model->forward(s.weights_for_passes(ch), nullptr, slot.acts, ch.scratch,
                                    ch.first() ? s.rows(tokens, mb) : nullptr,
                                    ch.first() ? nullptr : slot.recv_input,
                                    ch.last() ? s.rows(targets, mb) : nullptr, 1.0f);
      if (!ch.last())
        slot.pending.push_back({slot.acts.output(), s.send(*s.topo.pp_forward, slot.acts.output(), s.next_stage())});
    }
  }
  for (Chunk& ch : s.chunks) s.settle_before_writing(ch.slots[0], nullptr);
  // Every dp replica evaluated the same batches: count them once.
  return s.world_loss_sum(loss_sum) / s.topo.grid.dims().dp;
}

}  // namespace pipelane
