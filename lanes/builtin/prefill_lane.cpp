#include "lanes/builtin/prefill_lane.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include "lanes/builtin/state_bytes.h"

namespace pipelane {
namespace {

constexpr char kPrefillStateMagic[8] = {'P', 'L', 'P', 'R', 'E', 'F', 'L', '1'};

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Every arena buffer of the lane, in order, through `alloc(floats, what)` (int32 buffers are
// 4-byte too). Used both to size the arena and to allocate.
template <typename Alloc>
void plan_buffers(const PrefillSettings& s, std::size_t param_floats, Alloc&& alloc) {
  const std::size_t C = s.model.d_model, T = s.seq_len, NH = s.model.heads;
  const std::size_t n = static_cast<std::size_t>(std::min(s.chunk_tokens, s.seq_len));
  alloc(param_floats, "prefill.params");
  for (int l = 0; l < s.model.layers; ++l) {
    alloc(T * C, "prefill.kcache");
    alloc(T * C, "prefill.vcache");
  }
  alloc(T, "prefill.prompt");
  alloc(n * C, "prefill.x");
  alloc(n * C, "prefill.ln");
  alloc(n, "prefill.mean");
  alloc(n, "prefill.rstd");
  alloc(n * 3 * C, "prefill.qkv");
  alloc(n * C, "prefill.atty");
  alloc(n * C, "prefill.proj");
  alloc(n * 4 * C, "prefill.fch");
  alloc(n * 4 * C, "prefill.fch_gelu");
  alloc(n * NH * T, "prefill.scores");
  alloc(static_cast<std::size_t>(s.model.padded_vocab()), "prefill.logits");
}

PrefillSettings read_prefill_settings(const LaneContext& ctx) {
  const LaneOptions& o = ctx.options;
  PrefillSettings s;
  s.model.layers = static_cast<int>(o.get_int("layers", 2, 1, 256));
  s.model.d_model = static_cast<int>(o.get_int("d_model", 64, 1, 1 << 16));
  s.model.heads = static_cast<int>(o.get_int("heads", 2, 1, 1 << 12));
  s.seq_len = static_cast<int>(o.get_int("seq_len", 64, 1, 1 << 16));
  s.model.max_seq_len = s.seq_len;
  s.model.vocab_size = static_cast<int>(o.get_int("vocab_size", 256, 1, 1 << 24));
  s.chunk_tokens = static_cast<int>(o.get_int("chunk_tokens", 64, 1, 1 << 16));
  s.seed = static_cast<std::uint64_t>(
      o.get_int("seed", static_cast<std::int64_t>(ctx.seed + static_cast<std::uint64_t>(ctx.rank)),
                0, std::numeric_limits<std::int64_t>::max()));
  s.trace = o.get_string("trace", "");
  if (o.has("trace")) {
    for (const char* key : {"rate_per_s", "requests", "prompt_min", "prompt_max"})
      if (o.has(key))
        throw LaneError("lane prefill: '" + std::string(key) +
                        "' configures the request generator, which a trace replaces; give one");
    if (s.trace.empty()) throw LaneError("lane prefill: trace is empty");
  } else {
    s.rate_per_s = o.get_double("rate_per_s", 20.0, 1e-9, 1e9);
    s.requests = static_cast<int>(o.get_int("requests", 64, 1, 10'000'000));
    s.prompt_min = static_cast<int>(o.get_int("prompt_min", std::min(8, s.seq_len), 1, s.seq_len));
    s.prompt_max = static_cast<int>(o.get_int("prompt_max", s.seq_len, s.prompt_min, s.seq_len));
  }
  o.reject_unknown();
  const std::string problem = s.model.problem();
  if (!problem.empty()) throw LaneError("lane prefill: " + problem);
  return s;
}

}  // namespace

std::vector<PrefillRequest> read_prefill_trace(const std::string& path, int max_prompt_tokens) {
  std::ifstream in(path);
  if (!in) throw LaneError("lane prefill: cannot read trace " + path);
  std::vector<PrefillRequest> out;
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = raw;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    const auto comma = line.find(',');
    const std::string bad = where + "expected 'arrival_ms,prompt_tokens', got '" + trim(raw) + "'";
    if (comma == std::string::npos || line.find(',', comma + 1) != std::string::npos)
      throw LaneError(bad);
    const std::string a = trim(line.substr(0, comma)), p = trim(line.substr(comma + 1));
    if (a.empty() || p.empty()) throw LaneError(bad);
    char* end = nullptr;
    errno = 0;
    const double arrival = std::strtod(a.c_str(), &end);
    if (*end != '\0' || errno != 0) throw LaneError(bad);
    if (!std::isfinite(arrival) || arrival < 0)
      throw LaneError(where + "arrival_ms must be a finite number >= 0, got '" + a + "'");
    errno = 0;
    const long long tokens = std::strtoll(p.c_str(), &end, 10);
    if (*end != '\0' || errno != 0) throw LaneError(bad);
    if (tokens < 1 || tokens > max_prompt_tokens)
      throw LaneError(where + "prompt_tokens must be in [1, " + std::to_string(max_prompt_tokens) +
                      "] (seq_len), got " + p);
    out.push_back({static_cast<std::int64_t>(out.size()), arrival, static_cast<int>(tokens)});
  }
  if (in.bad()) throw LaneError("lane prefill: error reading trace " + path);
  if (out.empty()) throw LaneError("lane prefill: trace " + path + " holds no request");
  std::stable_sort(out.begin(), out.end(), [](const PrefillRequest& x, const PrefillRequest& y) {
    return x.arrival_ms < y.arrival_ms;
  });
  return out;
}

std::vector<PrefillRequest> poisson_prefill_requests(double rate_per_s, int requests, int prompt_min,
                                                     int prompt_max, std::uint64_t seed) {
  std::uint64_t state = seed ^ 0xA0761D6478BD642Full;
  std::vector<PrefillRequest> out;
  double t = 0;
  for (int i = 0; i < requests; ++i) {
    const double u = (static_cast<double>(splitmix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    t += -std::log(u) * 1000.0 / rate_per_s;
    const auto span = static_cast<std::uint64_t>(prompt_max - prompt_min + 1);
    const int len = prompt_min + static_cast<int>(splitmix64(state) % span);
    out.push_back({i, t, len});
  }
  return out;
}

void prefill_prompt_tokens(std::uint64_t seed, std::int64_t id, int length, int vocab_size,
                           std::int32_t* out) {
  std::uint64_t state = seed ^ 0xE7037ED1A0B428DBull;
  state ^= splitmix64(state) + static_cast<std::uint64_t>(id) * 0xD1B54A32D192ED03ull;
  for (int i = 0; i < length; ++i)
    out[i] = static_cast<std::int32_t>(splitmix64(state) % static_cast<std::uint64_t>(vocab_size));
}

double percentile_nearest_rank(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto n = static_cast<double>(values.size());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * n));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  return values[rank - 1];
}

std::size_t PrefillLane::arena_bytes_needed(const PrefillSettings& s) {
  const ParamLayout layout(s.model, StageRange::whole(s.model));
  std::size_t total = 0;
  plan_buffers(s, layout.total_floats(), [&](std::size_t floats, const char*) {
    total += align_up(floats * sizeof(float), Arena::kDefaultAlignment);
  });
  return total;
}

double PrefillLane::now_ms() const { return clock_() - start_ms_; }

void PrefillLane::setup(LaneContext& ctx) {
  s_ = read_prefill_settings(ctx);
  output_dir_ = ctx.output_dir;
  requests_ = s_.trace.empty() ? poisson_prefill_requests(s_.rate_per_s, s_.requests, s_.prompt_min,
                                                          s_.prompt_max, s_.seed)
                               : read_prefill_trace(s_.trace, s_.seq_len);
  stage_ = std::make_unique<GptStage>(s_.model, StageRange::whole(s_.model), ctx.backend, ctx.stream);
  const std::size_t need = arena_bytes_needed(s_);
  const std::size_t free_bytes = ctx.arena.capacity() - ctx.arena.used();
  if (need > free_bytes)
    throw LaneError("lane prefill: the model and its KV cache need " + std::to_string(need) +
                    " bytes of arena, arena '" + ctx.arena.name() + "' has " +
                    std::to_string(free_bytes) + " free of " + std::to_string(ctx.arena.capacity()));
  std::vector<float*> bufs;
  plan_buffers(s_, stage_->layout().total_floats(), [&](std::size_t floats, const char* what) {
    bufs.push_back(ctx.arena.allocate_n<float>(floats, what));
  });
  std::size_t i = 0;
  params_ = bufs[i++];
  kcache_.clear();
  vcache_.clear();
  for (int l = 0; l < s_.model.layers; ++l) {
    kcache_.push_back(bufs[i++]);
    vcache_.push_back(bufs[i++]);
  }
  prompt_ = reinterpret_cast<std::int32_t*>(bufs[i++]);
  x_ = bufs[i++];
  ln_ = bufs[i++];
  mean_ = bufs[i++];
  rstd_ = bufs[i++];
  qkv_ = bufs[i++];
  atty_ = bufs[i++];
  proj_ = bufs[i++];
  fch_ = bufs[i++];
  fchg_ = bufs[i++];
  scores_ = bufs[i++];
  logits_ = bufs[i++];
  prompt_host_.assign(static_cast<std::size_t>(s_.seq_len), 0);
  logits_host_.assign(static_cast<std::size_t>(s_.model.padded_vocab()), 0.f);
  {
    std::vector<float> staging(stage_->layout().total_floats());  // written on the host, copied in
    GptStage::init_parameters(stage_->layout(), staging.data(), s_.seed);
    ctx.backend.copy(params_, staging.data(), staging.size() * sizeof(float), ctx.stream);
    ctx.stream.synchronize();
  }
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double, std::milli>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
  start_ms_ = clock_();
  results_.clear();
  pos_ = 0;
  active_ms_ = 0;
  tokens_ = 0;
  if (!output_dir_.empty()) std::ofstream(output_dir_ + "/requests.jsonl", std::ios::trunc);
}

// Positions [p0, p1) of the head request's prompt (in prompt_), through every layer; K and V of
// those positions go to the cache, queries attend over cache rows [0, p].
void PrefillLane::prefill_chunk(int p0, int p1) {
  const ParamLayout& L = stage_->layout();
  Backend& b = stage_->backend();
  Stream& st = stage_->stream();
  const int C = s_.model.d_model, NH = s_.model.heads;
  const int n = p1 - p0;
  const std::size_t nC = static_cast<std::size_t>(n) * C;
  const float* P = params_;

  // Token embeddings, then the positions p0.. (consecutive rows of wpe).
  b.embedding_lookup_local(x_, prompt_ + p0, P + L.wte, n, C, 0, s_.model.padded_vocab(), st);
  b.add_inplace(x_, P + L.wpe + static_cast<std::size_t>(p0) * C, nC, st);
  for (int l = 0; l < s_.model.layers; ++l) {
    const LayerOffsets& o = L.layers[l];
    b.layernorm_forward(ln_, mean_, rstd_, x_, P + o.ln1w, P + o.ln1b, n, C, st);
    b.matmul_forward(qkv_, ln_, P + o.qkvw, P + o.qkvb, n, C, 3 * C, st);
    b.attention_forward_kv(atty_, scores_, qkv_, kcache_[l], vcache_[l], p0, n, C, NH, st);
    b.matmul_forward(proj_, atty_, P + o.attprojw, P + o.attprojb, n, C, C, st);
    b.add_inplace(x_, proj_, nC, st);
    b.layernorm_forward(ln_, mean_, rstd_, x_, P + o.ln2w, P + o.ln2b, n, C, st);
    b.matmul_forward(fch_, ln_, P + o.fcw, P + o.fcb, n, C, 4 * C, st);
    b.gelu_forward(fchg_, fch_, static_cast<std::size_t>(n) * 4 * C, st);
    b.matmul_forward(proj_, fchg_, P + o.fcprojw, P + o.fcprojb, n, 4 * C, C, st);
    b.add_inplace(x_, proj_, nC, st);
  }
}

double PrefillLane::step(LaneContext&) {
  if (finished()) return 0;
  const PrefillRequest& r = requests_[results_.size()];
  const double t0 = now_ms();
  if (pos_ == 0 && r.arrival_ms > t0) return 0;  // the queue is empty
  if (pos_ == 0) {  // made on the host, copied in (in the lane stream's order)
    prefill_prompt_tokens(s_.seed, r.id, r.prompt_tokens, s_.model.vocab_size, prompt_host_.data());
    stage_->backend().copy(prompt_, prompt_host_.data(), static_cast<std::size_t>(r.prompt_tokens) * sizeof(std::int32_t),
                           stage_->stream());
  }
  const int p0 = pos_;
  const int p1 = std::min(p0 + std::min(s_.chunk_tokens, s_.seq_len), r.prompt_tokens);
  prefill_chunk(p0, p1);
  pos_ = p1;
  tokens_ += p1 - p0;
  if (pos_ == r.prompt_tokens) {
    // The head on the request's last position (row p1-p0-1 of this chunk).
    const ParamLayout& L = stage_->layout();
    const int C = s_.model.d_model, Vp = s_.model.padded_vocab();
    const float* last = x_ + static_cast<std::size_t>(p1 - p0 - 1) * C;
    Backend& b = stage_->backend();
    b.layernorm_forward(ln_, mean_, rstd_, last, params_ + L.lnfw, params_ + L.lnfb, 1, C, stage_->stream());
    b.lm_head_logits(logits_, ln_, params_ + L.wte, 1, C, Vp, stage_->stream());
    b.copy(logits_host_.data(), logits_, logits_host_.size() * sizeof(float), stage_->stream());
    stage_->stream().synchronize();  // the argmax below reads the logits on the host
    std::int32_t best = 0;
    for (int v = 1; v < s_.model.vocab_size; ++v)
      if (logits_host_[v] > logits_host_[best]) best = v;
    PrefillResult res;
    res.id = r.id;
    res.arrival_ms = r.arrival_ms;
    res.done_ms = now_ms();
    res.prompt_tokens = r.prompt_tokens;
    res.first_token = best;
    results_.push_back(res);
    pos_ = 0;
    if (!output_dir_.empty()) {
      std::ofstream out(output_dir_ + "/requests.jsonl", std::ios::app);
      out << nlohmann::json{{"id", res.id},
                            {"arrival_ms", res.arrival_ms},
                            {"done_ms", res.done_ms},
                            {"ttft_ms", res.ttft_ms()},
                            {"prompt_tokens", res.prompt_tokens},
                            {"first_token", res.first_token}}
                 .dump()
          << "\n";
    }
  }
  active_ms_ += now_ms() - t0;
  return static_cast<double>(p1 - p0);
}

bool PrefillLane::finished() const { return !requests_.empty() && results_.size() == requests_.size(); }

std::size_t PrefillLane::queue_length() const {
  if (!clock_) return 0;
  const double t = now_ms();
  std::size_t q = 0;
  for (std::size_t i = results_.size(); i < requests_.size() && requests_[i].arrival_ms <= t; ++i) ++q;
  return q;
}

std::string PrefillLane::save() const {
  if (!stage_) throw LaneError("lane prefill: save() before setup()");
  StateWriter w;
  w.bytes(kPrefillStateMagic, sizeof kPrefillStateMagic);
  w.put<std::uint64_t>(s_.seed);
  w.put<std::uint64_t>(requests_.size());
  w.put<double>(now_ms());
  w.put<double>(active_ms_);
  w.put<std::int64_t>(tokens_);
  w.put<std::uint64_t>(results_.size());
  for (const PrefillResult& r : results_) {
    w.put<std::int64_t>(r.id);
    w.put<double>(r.arrival_ms);
    w.put<double>(r.done_ms);
    w.put<std::int32_t>(r.prompt_tokens);
    w.put<std::int32_t>(r.first_token);
  }
  return w.take();
}

void PrefillLane::load(const std::string& state) {
  if (!stage_) throw LaneError("lane prefill: load() before setup()");
  StateReader r(state, "prefill");
  char magic[sizeof kPrefillStateMagic];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kPrefillStateMagic, sizeof magic) != 0)
    throw LaneError("lane prefill: saved state is not a prefill state");
  if (r.get<std::uint64_t>() != s_.seed) throw LaneError("lane prefill: saved state was made with another seed");
  if (r.get<std::uint64_t>() != requests_.size())
    throw LaneError("lane prefill: saved state was made for another request list");
  const double elapsed = r.get<double>();
  const double active = r.get<double>();
  const auto tokens = r.get<std::int64_t>();
  const auto n = r.get<std::uint64_t>();
  if (n > requests_.size()) throw LaneError("lane prefill: saved state is inconsistent");
  std::vector<PrefillResult> results(n);
  for (std::size_t i = 0; i < n; ++i) {
    PrefillResult& x = results[i];
    x.id = r.get<std::int64_t>();
    x.arrival_ms = r.get<double>();
    x.done_ms = r.get<double>();
    x.prompt_tokens = r.get<std::int32_t>();
    x.first_token = r.get<std::int32_t>();
    if (x.id != requests_[i].id || x.prompt_tokens != requests_[i].prompt_tokens)
      throw LaneError("lane prefill: saved state was made for another request list");
  }
  if (!r.at_end()) throw LaneError("lane prefill: saved state has trailing bytes");
  results_ = std::move(results);
  start_ms_ = clock_() - elapsed;  // arrivals stay where they were relative to the first start
  active_ms_ = active;
  tokens_ = tokens;
  pos_ = 0;  // a request part-way through prefill starts over (the KV cache is not saved)
}

nlohmann::json PrefillLane::report() const {
  nlohmann::json j;
  const std::size_t done = results_.size();
  j["requests_done"] = done;
  j["requests_total"] = requests_.size();
  j["prompt_tokens"] = tokens_;
  j["queue_length"] = queue_length();
  j["active_ms"] = active_ms_;
  const double wall_ms = finished() && done > 0 ? results_.back().done_ms : (clock_ ? now_ms() : 0.0);
  j["wall_ms"] = wall_ms;
  j["requests_per_s_active"] = active_ms_ > 0 ? nlohmann::json(done / (active_ms_ / 1000.0)) : nlohmann::json();
  j["requests_per_s_wall"] = wall_ms > 0 ? nlohmann::json(done / (wall_ms / 1000.0)) : nlohmann::json();
  std::vector<double> ttft;
  ttft.reserve(done);
  for (const PrefillResult& r : results_) ttft.push_back(r.ttft_ms());
  if (!ttft.empty()) {
    j["ttft_ms_p50"] = percentile_nearest_rank(ttft, 50);
    j["ttft_ms_p99"] = percentile_nearest_rank(ttft, 99);
    j["ttft_ms_max"] = *std::max_element(ttft.begin(), ttft.end());
  }
  j["chunk_tokens"] = s_.chunk_tokens;
  return j;
}

std::unique_ptr<Lane> make_prefill_lane() { return std::make_unique<PrefillLane>(); }

}  // namespace pipelane
