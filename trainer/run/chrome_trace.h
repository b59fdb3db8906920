// trace.json in Chrome's trace-event format (opens in Perfetto / chrome://tracing): one track per
// rank, a slice per instruction (name, microbatch, chunk) and a nested slice per wait with its
// kind. Events are typed values until write_chrome_trace turns them into JSON: ranks make their
// own, rank 0 gathers them (trainer/run/rank_results.h) and writes the file; the simulator
// (trainer/sim/sim_report.h) makes them for its stages.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/pipeline_executor.h"

namespace pipelane {

struct TraceArg {
  std::string key;
  std::variant<std::int64_t, double, std::string> value;
};
inline TraceArg integer_arg(std::string key, std::int64_t v) { return {std::move(key), v}; }
inline TraceArg number_arg(std::string key, double v) { return {std::move(key), v}; }
inline TraceArg text_arg(std::string key, std::string v) { return {std::move(key), std::move(v)}; }

struct TraceEvent {
  std::string name;
  std::string category;  // empty: the metadata event that names track `tid` (its args: "name")
  int tid = 0;
  double ts_us = 0, dur_us = 0;  // microseconds; a slice's ("ph": "X")
  std::vector<TraceArg> args;
};

// The metadata event naming track `tid`.
TraceEvent track_name_event(int tid, const std::string& name);

// This rank's events for the given steps; `step_numbers[k]` is the training step `steps[k]` was.
std::vector<TraceEvent> trace_events(const std::vector<StepStats>& steps, const std::vector<int>& step_numbers,
                                     int world_rank, const std::string& track_name);

nlohmann::json to_json(const TraceEvent& event);

// Writes {"traceEvents": [...], "displayTimeUnit": "ms"} under a temporary name, then renames.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events);

}  // namespace pipelane
