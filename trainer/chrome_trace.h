// trace.json in Chrome's trace-event format (opens in Perfetto / chrome://tracing): one track per
// rank, a slice per instruction (name, microbatch, chunk) and a nested slice per wait with its
// kind. Ranks serialise their own events; rank 0 gathers and writes the file.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/pipeline_executor.h"

namespace pipelane {

// This rank's events for the given steps, as a JSON array of trace events.
nlohmann::json trace_events(const std::vector<StepStats>& steps, int world_rank,
                            const std::string& track_name);

// Writes {"traceEvents": [...], "displayTimeUnit": "ms"} under a temporary name, then renames.
void write_chrome_trace(const std::string& path, const nlohmann::json& events);

}  // namespace pipelane
