#include "trainer/run/rank_results.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace pipelane {

namespace {

// Fields appended in order: integers and doubles as their 8 bytes, strings and lists
// length-first (both ends are the same build, so the same byte order).
class FieldWriter {
 public:
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void i64(std::int64_t v) { raw(&v, sizeof v); }
  void f64(double v) { raw(&v, sizeof v); }
  void flag(bool v) { bytes_.push_back(v ? 1 : 0); }
  void text(const std::string& s) {
    u64(s.size());
    bytes_ += s;
  }
  std::string take() { return std::move(bytes_); }

 private:
  void raw(const void* p, std::size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

// The same fields read back; reading past the end is std::runtime_error.
class FieldReader {
 public:
  explicit FieldReader(const std::string& bytes) : bytes_(bytes) {}
  std::uint64_t u64() { return raw<std::uint64_t>(); }
  std::int64_t i64() { return raw<std::int64_t>(); }
  double f64() { return raw<double>(); }
  bool flag() { return raw<char>() != 0; }
  std::string text() {
    const std::uint64_t n = u64();
    need(n);
    std::string s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  std::size_t count() {  // of a list: each element takes a byte at least
    const std::uint64_t n = u64();
    need(n);
    return static_cast<std::size_t>(n);
  }
  void expect_end() const {
    if (at_ != bytes_.size()) throw std::runtime_error("a rank's result has " + std::to_string(bytes_.size() - at_) + " bytes too many");
  }

 private:
  template <typename T>
  T raw() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  void need(std::uint64_t n) const {
    if (n > bytes_.size() - at_) throw std::runtime_error("a rank's result ends early");
  }
  const std::string& bytes_;
  std::size_t at_ = 0;
};

void write_lane(FieldWriter& w, const LaneStats& l) {
  w.text(l.work_unit);
  w.f64(l.units);
  w.i64(l.steps);
  w.f64(l.lane_s);
  w.f64(l.calibration_units);
  w.i64(l.calibration_steps);
  w.f64(l.harvested_s);
  w.f64(l.overrun_s);
  w.f64(l.calibrated_step_s);
  w.f64(l.predicted_step_s);
  w.flag(l.finished);
  w.flag(l.quarantined);
  w.text(l.quarantine_reason);
  w.u64(l.memory_high_water_bytes);
  w.text(l.isolation);
  w.text(l.runs_on);
  w.i64(l.backlog_skipped_steps);
  w.text(l.report.dump());
}

LaneStats read_lane(FieldReader& r) {
  LaneStats l;
  l.work_unit = r.text();
  l.units = r.f64();
  l.steps = r.i64();
  l.lane_s = r.f64();
  l.calibration_units = r.f64();
  l.calibration_steps = r.i64();
  l.harvested_s = r.f64();
  l.overrun_s = r.f64();
  l.calibrated_step_s = r.f64();
  l.predicted_step_s = r.f64();
  l.finished = r.flag();
  l.quarantined = r.flag();
  l.quarantine_reason = r.text();
  l.memory_high_water_bytes = r.u64();
  l.isolation = r.text();
  l.runs_on = r.text();
  l.backlog_skipped_steps = r.i64();
  l.report = nlohmann::json::parse(r.text());
  return l;
}

// The kinds of a trace event's argument, in TraceArgValue's order.
void write_arg(FieldWriter& w, const TraceArg& a) {
  w.text(a.key);
  w.u64(a.value.index());
  if (const auto* i = std::get_if<std::int64_t>(&a.value)) w.i64(*i);
  else if (const auto* d = std::get_if<double>(&a.value)) w.f64(*d);
  else w.text(std::get<std::string>(a.value));
}

TraceArg read_arg(FieldReader& r) {
  TraceArg a;
  a.key = r.text();
  switch (r.u64()) {
    case 0: a.value = r.i64(); break;
    case 1: a.value = r.f64(); break;
    case 2: a.value = r.text(); break;
    default: throw std::runtime_error("a rank's trace event has an argument of no known kind");
  }
  return a;
}

// Every rank's bytes on rank 0, each decoded with its rank named if it does not.
template <typename T, typename Decode>
std::vector<T> gather_decoded(ControlPlane& world, const std::string& mine, Decode decode) {
  std::vector<T> out;
  const std::vector<std::string> parts = gather_to_root(world, mine);
  for (std::size_t rank = 0; rank < parts.size(); ++rank) {
    try {
      out.push_back(decode(parts[rank]));
    } catch (const std::exception& e) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": " + e.what());
    }
  }
  return out;
}

}  // namespace

std::string encode_lane_summary(const std::optional<StageLaneSummary>& summary) {
  FieldWriter w;
  w.flag(summary.has_value());
  if (!summary) return w.take();
  const StageLaneSummary& s = *summary;
  w.i64(s.stage);
  w.i64(s.rank);
  w.u64(s.gaps);
  w.f64(s.bubble_s);
  w.f64(s.harvested_s);
  w.f64(s.overrun_s);
  w.f64(s.bubble_after_profiling_s);
  w.f64(s.harvested_after_profiling_s);
  w.f64(s.margin);
  w.flag(s.deterministic);
  w.i64(s.profile_iterations);
  w.u64(s.lanes.size());
  for (const auto& [name, lane] : s.lanes) {
    w.text(name);
    write_lane(w, lane);
  }
  w.u64(s.plan.size());
  for (const auto& [gap_id, names] : s.plan) {
    w.i64(gap_id);
    w.u64(names.size());
    for (const std::string& name : names) w.text(name);
  }
  w.flag(s.interference.has_value());
  if (const auto& e = s.interference) {
    w.i64(e->control_every);
    w.i64(e->control_gaps);
    w.i64(e->lane_gaps);
    w.i64(e->compared_lane_gaps);
    w.i64(e->compared_control_gaps);
    w.flag(e->estimated);
    w.f64(e->extra_s);
    w.f64(e->stderr_s);
  }
  return w.take();
}

std::optional<StageLaneSummary> decode_lane_summary(const std::string& bytes) {
  FieldReader r(bytes);
  if (!r.flag()) {
    r.expect_end();
    return std::nullopt;
  }
  StageLaneSummary s;
  s.stage = static_cast<int>(r.i64());
  s.rank = static_cast<int>(r.i64());
  s.gaps = r.u64();
  s.bubble_s = r.f64();
  s.harvested_s = r.f64();
  s.overrun_s = r.f64();
  s.bubble_after_profiling_s = r.f64();
  s.harvested_after_profiling_s = r.f64();
  s.margin = r.f64();
  s.deterministic = r.flag();
  s.profile_iterations = static_cast<int>(r.i64());
  for (std::size_t n = r.count(); n > 0; --n) {
    std::string name = r.text();
    s.lanes[name] = read_lane(r);
  }
  for (std::size_t n = r.count(); n > 0; --n) {
    std::vector<std::string>& names = s.plan[static_cast<int>(r.i64())];
    for (std::size_t k = r.count(); k > 0; --k) names.push_back(r.text());
  }
  if (r.flag()) {
    InterferenceEstimate& e = s.interference.emplace();
    e.control_every = static_cast<int>(r.i64());
    e.control_gaps = r.i64();
    e.lane_gaps = r.i64();
    e.compared_lane_gaps = r.i64();
    e.compared_control_gaps = r.i64();
    e.estimated = r.flag();
    e.extra_s = r.f64();
    e.stderr_s = r.f64();
  }
  r.expect_end();
  return s;
}

std::string encode_trace_events(const std::vector<TraceEvent>& events) {
  FieldWriter w;
  w.u64(events.size());
  for (const TraceEvent& e : events) {
    w.text(e.name);
    w.text(e.category);
    w.i64(e.tid);
    w.f64(e.ts_us);
    w.f64(e.dur_us);
    w.u64(e.args.size());
    for (const TraceArg& a : e.args) write_arg(w, a);
  }
  return w.take();
}

std::vector<TraceEvent> decode_trace_events(const std::string& bytes) {
  FieldReader r(bytes);
  std::vector<TraceEvent> events(r.count());
  for (TraceEvent& e : events) {
    e.name = r.text();
    e.category = r.text();
    e.tid = static_cast<int>(r.i64());
    e.ts_us = r.f64();
    e.dur_us = r.f64();
    for (std::size_t n = r.count(); n > 0; --n) e.args.push_back(read_arg(r));
  }
  r.expect_end();
  return events;
}

std::vector<std::optional<StageLaneSummary>> gather_lane_summaries(ControlPlane& world,
                                                                   const std::optional<StageLaneSummary>& mine) {
  return gather_decoded<std::optional<StageLaneSummary>>(world, encode_lane_summary(mine), decode_lane_summary);
}

std::vector<TraceEvent> gather_trace_events(ControlPlane& world, const std::vector<TraceEvent>& mine) {
  std::vector<TraceEvent> all;
  for (std::vector<TraceEvent>& events : gather_decoded<std::vector<TraceEvent>>(world, encode_trace_events(mine), decode_trace_events))
    for (TraceEvent& e : events) all.push_back(std::move(e));
  return all;
}

}  // namespace pipelane
